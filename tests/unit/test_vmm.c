/* vmm/: the domain XML (pure), names, metadata parsing, config checks, and
 * the domain bookkeeping against libvirt's built-in test:///default driver
 * (no qemu). The socket transport is tested against a fake qemu end (a unix
 * socket server in this process); booting real guests is the integration
 * tests' job. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include "agentless/wire.h"
#include "util/util.h"
#include "vmm/vmm-priv.h"
#include "vmm/vmm.h"

/* ------------------------------------------------------------ XML */

static struct vmm_config xml_cfg(void)
{
	struct vmm_config c = {
	    .uri = "test:///default",
	    .name_prefix = "t-vmm-",
	    .kernel = "/srv/k/vmlinux",
	    .initrd = "/srv/k/initramfs.cpio.gz",
	    .run_dir = "/run/sbx",
	    .tb_cache_mib = 0,
	    .free_page_reporting = true,
	};
	return c;
}

static int count(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static void test_xml_tcg(void **state)
{
	(void)state;
	struct vmm_config c = xml_cfg();
	struct vmm_guest_spec s = {.vcpus = 2, .memory_mib = 1024, .sandbox_id = "sbx_123"};
	char *x = vmm_domain_xml(&c, "t-vmm-0123456789ab", &s, false);
	assert_non_null(x);
	assert_non_null(strstr(x, "<domain type='qemu'>"));
	assert_non_null(strstr(x, "<name>t-vmm-0123456789ab</name>"));
	assert_non_null(strstr(x, "<memory unit='MiB'>1024</memory>"));
	assert_non_null(strstr(x, "<vcpu>2</vcpu>"));
	assert_non_null(strstr(x, "machine='pc'"));
	assert_non_null(strstr(x, "<kernel>/srv/k/vmlinux</kernel>"));
	assert_non_null(strstr(x, "<initrd>/srv/k/initramfs.cpio.gz</initrd>"));
	assert_non_null(strstr(x, "console=ttyS0 panic=-1 rdinit=/init"));
	assert_null(strstr(x, "acpi=off"));
	assert_non_null(strstr(x, "<acpi/>"));
	assert_non_null(strstr(x, "<on_reboot>destroy</on_reboot>"));
	assert_non_null(strstr(x, "<on_poweroff>destroy</on_poweroff>"));
	assert_non_null(strstr(x, "<on_crash>destroy</on_crash>"));
	assert_non_null(strstr(x, "<target type='virtio' name='org.sandboxd.exec.0'/>"));
	assert_non_null(strstr(x, "name='" WIRE_PORT_NAME "'")); /* vmm's copy agrees */
	assert_non_null(strstr(x, "<source mode='bind' path='/run/sbx/t-vmm-0123456789ab.sock'/>"));
	assert_non_null(strstr(x, "/run/sbx/t-vmm-0123456789ab.console.log"));
	assert_non_null(strstr(x, "xmlns:sbx='" VMM_METADATA_NS "'><sbx:id>sbx_123</sbx:id>"));
	assert_non_null(strstr(x, "qemu64"));
	assert_null(strstr(x, "host-passthrough"));
	assert_non_null(strstr(x, "<memballoon model='virtio' freePageReporting='on'/>"));
	assert_non_null(strstr(x, "<backend model='random'>/dev/urandom</backend>"));
	assert_non_null(strstr(x, "<controller type='usb' model='none'/>"));
	assert_non_null(strstr(x, "<controller type='virtio-serial'"));
	assert_null(strstr(x, "<interface"));
	assert_null(strstr(x, "<graphics"));
	assert_null(strstr(x, "<disk")); /* no base image */
	assert_null(strstr(x, "<emulator"));
	free(x);
}

static void test_xml_without_free_page_reporting(void **state)
{
	(void)state;
	struct vmm_config c = xml_cfg();
	c.free_page_reporting = false;
	struct vmm_guest_spec s = {.vcpus = 1, .memory_mib = 256};
	char *x = vmm_domain_xml(&c, "t-vmm-a", &s, false);
	assert_non_null(x);
	assert_non_null(strstr(x, "<memballoon model='none'/>"));
	assert_null(strstr(x, "freePageReporting"));
	assert_int_equal(count(x, "<memballoon"), 1);
	assert_non_null(strstr(x, "</devices>\n</domain>\n"));
	free(x);
}

/* With metrics on, the balloon carries a statistics period (whole
 * seconds) so the guest reports its memory; without the balloon or with
 * the period 0, none. */
static void test_xml_balloon_stats_period(void **state)
{
	(void)state;
	struct vmm_config c = xml_cfg();
	struct vmm_guest_spec s = {.vcpus = 1, .memory_mib = 256};
	char *x;

	c.balloon_stats_period_s = 5;
	x = vmm_domain_xml(&c, "t-vmm-a", &s, false);
	assert_non_null(x);
	assert_non_null(strstr(x, "<memballoon model='virtio' freePageReporting='on'>\n"
				  "      <stats period='5'/>\n"
				  "    </memballoon>\n"));
	assert_int_equal(count(x, "<memballoon"), 1);
	free(x);
	c.balloon_stats_period_s = 0;
	x = vmm_domain_xml(&c, "t-vmm-a", &s, false);
	assert_non_null(strstr(x, "<memballoon model='virtio' freePageReporting='on'/>"));
	assert_null(strstr(x, "<stats"));
	free(x);
	c.balloon_stats_period_s = 5;
	c.free_page_reporting = false;
	x = vmm_domain_xml(&c, "t-vmm-a", &s, false);
	assert_non_null(strstr(x, "<memballoon model='none'/>"));
	assert_null(strstr(x, "<stats"));
	free(x);
}

/* A guest made from a snapshot: overlay -> the snapshot's file (labelled
 * by libvirt) -> the base (never relabelled); without one, overlay ->
 * base. */
static void test_xml_snapshot_chain(void **state)
{
	(void)state;
	struct vmm_config c = xml_cfg();
	struct vmm_guest_spec s = {.vcpus = 1, .memory_mib = 256, .disk_gib = 2};
	char *x;

	c.base_image = "/srv/img/base.qcow2";
	x = vmm_domain_xml(&c, "t-vmm-a", &s, false);
	assert_non_null(x);
	assert_int_equal(count(x, "<backingStore type='file'>"), 1);
	assert_null(strstr(x, "snap_"));
	free(x);
	s.snapshot_id = "snap_0123abcd";
	x = vmm_domain_xml(&c, "t-vmm-a", &s, false);
	assert_non_null(x);
	assert_int_equal(count(x, "<backingStore type='file'>"), 2);
	assert_int_equal(count(x, "</backingStore>"), 2);
	const char *ov = strstr(x, "<source file='/run/sbx/t-vmm-a.qcow2'/>");
	const char *sn = strstr(x, "<source file='/run/sbx/snap_0123abcd.qcow2'/>");
	const char *base = strstr(x, "<source file='/srv/img/base.qcow2'>");
	assert_true(ov && sn && base && ov < sn && sn < base);
	assert_int_equal(count(x, "relabel='no'"), 1);
	free(x);
}

/* A guest's threads together never get more than host_cpus - 1 CPUs, so
 * a guest that floods its channel (or just computes) always leaves a CPU
 * to the daemon, libvirtd and the other guests (docs/vmm.md, "CPU
 * bound"); no bound when the host's size is unknown or one CPU. */
static void test_xml_cpu_bound(void **state)
{
	(void)state;
	struct vmm_config c = xml_cfg();
	struct vmm_guest_spec s = {.vcpus = 2, .memory_mib = 256};
	c.host_cpus = 2;
	char *x = vmm_domain_xml(&c, "t-vmm-a", &s, false);
	assert_non_null(x);
	assert_non_null(strstr(x, "  <cputune>\n"
				  "    <global_period>100000</global_period>\n"
				  "    <global_quota>100000</global_quota>\n"
				  "  </cputune>\n"));
	assert_int_equal(count(x, "<cputune>"), 1);
	free(x);

	c.host_cpus = 8;
	x = vmm_domain_xml(&c, "t-vmm-a", &s, true);
	assert_non_null(x);
	assert_non_null(strstr(x, "<global_quota>700000</global_quota>"));
	free(x);

	for (unsigned n = 0; n < 2; n++) {
		c.host_cpus = n;
		x = vmm_domain_xml(&c, "t-vmm-a", &s, false);
		assert_non_null(x);
		assert_null(strstr(x, "cputune"));
		free(x);
	}
}

static void test_xml_kvm_and_tb_cache(void **state)
{
	(void)state;
	struct vmm_config c = xml_cfg();
	c.tb_cache_mib = 32;
	struct vmm_guest_spec s = {.vcpus = 1, .memory_mib = 256};
	char *x = vmm_domain_xml(&c, "t-vmm-a", &s, true);
	assert_non_null(x);
	assert_non_null(strstr(x, "<domain type='kvm'>"));
	assert_non_null(strstr(x, "host-passthrough"));
	assert_null(strstr(x, "tb-cache"));   /* TCG only */
	assert_null(strstr(x, "<metadata>")); /* no sandbox id */
	free(x);

	x = vmm_domain_xml(&c, "t-vmm-a", &s, false);
	assert_non_null(x);
	assert_non_null(strstr(x, "<tcg><tb-cache unit='MiB'>32</tb-cache></tcg>"));
	assert_non_null(strstr(x, "<acpi/>"));
	assert_int_equal(count(x, "<features>"), 1);
	free(x);
}

static void test_xml_disk_only_with_base(void **state)
{
	(void)state;
	struct vmm_config c = xml_cfg();
	c.base_image = "/srv/base.qcow2";
	struct vmm_guest_spec s = {.vcpus = 1, .memory_mib = 256, .disk_gib = 40};
	char *x = vmm_domain_xml(&c, "t-vmm-d", &s, false);
	assert_non_null(x);
	assert_int_equal(count(x, "<disk "), 1);
	assert_non_null(strstr(x, "<source file='/run/sbx/t-vmm-d.qcow2'/>"));
	assert_non_null(strstr(x, "error_policy='report'"));
	assert_non_null(strstr(x, "<target dev='vda' bus='virtio'/>"));
	assert_non_null(strstr(x, "<source file='/srv/base.qcow2'>"));
	assert_non_null(strstr(x, "relabel='no'"));
	/* The guest init switches to the disk when told so. */
	assert_non_null(strstr(x, " sandboxd.root=/dev/vda</cmdline>"));
	free(x);

	s.disk_gib = 0; /* a spec without disk gets none even with a base */
	x = vmm_domain_xml(&c, "t-vmm-d", &s, false);
	assert_non_null(x);
	assert_null(strstr(x, "<disk"));
	assert_null(strstr(x, "sandboxd.root="));
	free(x);
}

static void test_xml_escaping(void **state)
{
	(void)state;
	struct vmm_config c = xml_cfg();
	c.cmdline = "root=/dev/vda x='<&>\"'";
	c.run_dir = "/run/a'b&c";
	struct vmm_guest_spec s = {.vcpus = 1, .memory_mib = 256, .sandbox_id = "a'<b>&"};
	char *x = vmm_domain_xml(&c, "t-vmm-e", &s, false);
	assert_non_null(x);
	assert_non_null(strstr(x, "<sbx:id>a&apos;&lt;b&gt;&amp;</sbx:id>"));
	assert_non_null(strstr(
	    x, "quiet swiotlb=noforce root=/dev/vda x=&apos;&lt;&amp;&gt;&quot;&apos;</cmdline>"));
	assert_non_null(strstr(x, "path='/run/a&apos;b&amp;c/t-vmm-e.sock'"));
	assert_null(strstr(x, "a'<b>"));
	/* Every '<' opens a tag: the id and cmdline added none. */
	struct vmm_config plain = xml_cfg();
	struct vmm_guest_spec ps = {.vcpus = 1, .memory_mib = 256, .sandbox_id = "abcdef"};
	char *y = vmm_domain_xml(&plain, "t-vmm-e", &ps, false);
	assert_non_null(y);
	assert_int_equal(count(x, "<"), count(y, "<"));
	free(y);
	free(x);

	/* Control characters cannot be represented in XML 1.0: refused. */
	s.sandbox_id = "a\x01z";
	assert_null(vmm_domain_xml(&c, "t-vmm-e", &s, false));
	s.sandbox_id = "a\nz";
	assert_null(vmm_domain_xml(&c, "t-vmm-e", &s, false));
	s.sandbox_id = "caf\xc3\xa9";
	assert_null(vmm_domain_xml(&c, "t-vmm-e", &s, false));
	s.sandbox_id = NULL;
	s.memory_mib = 0;
	assert_null(vmm_domain_xml(&c, "t-vmm-e", &s, false));
}

static void test_names(void **state)
{
	(void)state;
	assert_true(vmm_name_valid("sbx-0123456789ab"));
	assert_true(vmm_name_valid("A.b_c-9"));
	assert_false(vmm_name_valid(NULL));
	assert_false(vmm_name_valid(""));
	assert_false(vmm_name_valid(".hidden"));
	assert_false(vmm_name_valid("a/b"));
	assert_false(vmm_name_valid("../x"));
	assert_false(vmm_name_valid("a b"));
	assert_false(vmm_name_valid("a'b"));
	assert_false(vmm_name_valid("a\xc3\xa9"));
	char longname[VMM_NAME_MAX + 2];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[VMM_NAME_MAX + 1] = '\0';
	assert_false(vmm_name_valid(longname));
	longname[VMM_NAME_MAX] = '\0';
	assert_true(vmm_name_valid(longname));

	struct vmm_config c = xml_cfg();
	struct vmm_guest_spec s = {.vcpus = 1, .memory_mib = 256};
	assert_null(vmm_domain_xml(&c, "bad name", &s, false));
	assert_null(vmm_domain_xml(&c, "x</name><devices>", &s, false));
	assert_null(vmm_domain_xml(&c, NULL, &s, false));
}

static void test_metadata_parse(void **state)
{
	(void)state;
	char out[64];
	assert_int_equal(vmm_priv_metadata_id("<sbx:sandbox xmlns:sbx=\"" VMM_METADATA_NS
					      "\"><sbx:id>a&apos;&lt;b&gt;&amp;</sbx:id>"
					      "</sbx:sandbox>",
					      out, sizeof(out)),
			 0);
	assert_string_equal(out, "a'<b>&");
	assert_int_equal(vmm_priv_metadata_id("<sandbox xmlns=\"x\">\n  <id>sbx_1</id>\n</sandbox>",
					      out, sizeof(out)),
			 0);
	assert_string_equal(out, "sbx_1");
	assert_int_equal(vmm_priv_metadata_id("<s><id>&#39;&#x41;</id></s>", out, sizeof(out)), 0);
	assert_string_equal(out, "'A");
	/* <idx> is not <id>. */
	assert_int_equal(vmm_priv_metadata_id("<s><idx>1</idx></s>", out, sizeof(out)), -1);
	assert_int_equal(vmm_priv_metadata_id("<s><id>unterminated", out, sizeof(out)), -1);
	assert_int_equal(vmm_priv_metadata_id("<s><id>&bogus;</id></s>", out, sizeof(out)), -1);
	assert_int_equal(vmm_priv_metadata_id("<s><id>&#1;</id></s>", out, sizeof(out)), -1);
	assert_int_equal(vmm_priv_metadata_id("<s><id>0123456789</id></s>", out, 10), -1);
	assert_int_equal(vmm_priv_metadata_id("<s><id>012345678</id></s>", out, 10), 0);
	assert_int_equal(vmm_priv_metadata_id(NULL, out, sizeof(out)), -1);
	assert_int_equal(vmm_priv_metadata_id("", out, sizeof(out)), -1);
}

/* ------------------------------------------------- test:///default */

struct fx {
	char dir[64];
	char run_dir[96];
	char kernel[96];
	char initrd[96];
	char base[96];
	struct vmm_config cfg;
	struct vmm *v;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char stopped[8][80];
	int n_stopped;
};

static void touch(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	close(fd);
}

static int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/t-vmm-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->run_dir, sizeof(f->run_dir), "%s/run", f->dir);
	snprintf(f->kernel, sizeof(f->kernel), "%s/vmlinux", f->dir);
	snprintf(f->initrd, sizeof(f->initrd), "%s/initramfs", f->dir);
	snprintf(f->base, sizeof(f->base), "%s/base.qcow2", f->dir);
	touch(f->kernel);
	touch(f->initrd);
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	static char prefix[32];
	snprintf(prefix, sizeof(prefix), "t-vmm-%d-", (int)getpid());
	f->cfg = (struct vmm_config){
	    .uri = "test:///default",
	    .name_prefix = prefix,
	    .accel = VMM_ACCEL_TCG,
	    .allow_tcg = true,
	    .kernel = f->kernel,
	    .initrd = f->initrd,
	    .run_dir = f->run_dir,
	    .transport = VMM_TRANSPORT_SOCKET,
	    .console_log_max = 1 << 20,
	};
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;
	if (f->v)
		vmm_free(f->v);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	if (system(cmd) != 0)
		return -1;
	free(f);
	return 0;
}

static void on_stopped(void *opaque, const char *name)
{
	struct fx *f = opaque;
	pthread_mutex_lock(&f->lock);
	if (f->n_stopped < 8)
		snprintf(f->stopped[f->n_stopped++], sizeof(f->stopped[0]), "%s", name);
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

static bool wait_stopped(struct fx *f, const char *name, int ms)
{
	struct timespec ts = sbx_timespec_in(CLOCK_REALTIME, ms);
	bool found = false;
	pthread_mutex_lock(&f->lock);
	for (;;) {
		for (int i = 0; i < f->n_stopped; i++)
			if (strcmp(f->stopped[i], name) == 0)
				found = true;
		if (found || pthread_cond_timedwait(&f->cond, &f->lock, &ts) != 0)
			break;
	}
	for (int i = 0; !found && i < f->n_stopped; i++)
		if (strcmp(f->stopped[i], name) == 0)
			found = true;
	pthread_mutex_unlock(&f->lock);
	return found;
}

struct listing {
	int n;
	char names[8][80];
	char ids[8][160];
};

static void collect(void *opaque, const char *name, const char *id)
{
	struct listing *l = opaque;
	if (l->n < 8) {
		snprintf(l->names[l->n], sizeof(l->names[0]), "%s", name);
		snprintf(l->ids[l->n], sizeof(l->ids[0]), "%s", id);
	}
	l->n++;
}

static bool file_exists(const char *dir, const char *name, const char *suffix)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/%s%s", dir, name, suffix);
	return access(p, F_OK) == 0;
}

static void test_config_errors(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	struct vmm_config c = f->cfg;
	c.allow_tcg = false;
	assert_null(vmm_new(&c, &err));
	assert_int_equal(err.code, SBX_E_INTERNAL);
	assert_string_equal(err.message, "tcg acceleration needed but not allowed (allow_tcg)");

	c = f->cfg;
	char missing[128];
	snprintf(missing, sizeof(missing), "%s/nope", f->dir);
	c.kernel = missing;
	sbx_error_clear(&err);
	assert_null(vmm_new(&c, &err));
	assert_int_equal(err.code, SBX_E_INTERNAL);
	assert_string_equal(err.param, "kernel");

	c = f->cfg;
	c.name_prefix = "bad/prefix";
	sbx_error_clear(&err);
	assert_null(vmm_new(&c, &err));
	assert_int_equal(err.code, SBX_E_INTERNAL);

	c = f->cfg;
	c.run_dir = "relative/dir";
	sbx_error_clear(&err);
	assert_null(vmm_new(&c, &err));
	assert_int_equal(err.code, SBX_E_INTERNAL);

	c = f->cfg;
	c.uri = "nosuchdriver:///x";
	sbx_error_clear(&err);
	assert_null(vmm_new(&c, &err));
	assert_int_equal(err.code, SBX_E_SERVICE_UNAVAILABLE);
}

static void test_bookkeeping(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	f->v = vmm_new(&f->cfg, &err);
	assert_non_null(f->v);
	assert_string_equal(vmm_accel_name(f->v), "tcg");
	struct stat st;
	assert_int_equal(stat(f->run_dir, &st), 0); /* created */
	assert_int_equal(st.st_mode & 0777, 0755);
	vmm_priv_set_virt_type(f->v, "test");
	vmm_set_stopped_callback(f->v, on_stopped, f);

	struct vmm_guest_spec spec = {.vcpus = 1, .memory_mib = 128, .sandbox_id = "a'<b>&"};
	struct vmm_vm *vm = vmm_vm_start(f->v, &spec, &err);
	assert_non_null(vm);
	const char *name = vmm_vm_name(vm);
	size_t plen = strlen(f->cfg.name_prefix);
	assert_int_equal(strncmp(name, f->cfg.name_prefix, plen), 0);
	assert_int_equal(strlen(name), plen + 12);
	assert_int_equal(strspn(name + plen, "0123456789abcdef"), 12);
	assert_true(vmm_vm_is_running(vm));

	/* A second guest gets another name. */
	struct vmm_guest_spec spec2 = {.vcpus = 1, .memory_mib = 128};
	struct vmm_vm *vm2 = vmm_vm_start(f->v, &spec2, &err);
	assert_non_null(vm2);
	assert_string_not_equal(vmm_vm_name(vm2), name);

	/* Listing: ours only (the driver's own "test" domain is skipped), with
	 * the hostile id surviving libvirt's metadata round trip. */
	struct listing l = {0};
	assert_int_equal(vmm_list_domains(f->v, collect, &l, &err), 2);
	assert_int_equal(l.n, 2);
	int i1 = strcmp(l.names[0], name) == 0 ? 0 : 1;
	assert_string_equal(l.names[i1], name);
	assert_string_equal(l.ids[i1], "a'<b>&");
	assert_string_equal(l.ids[1 - i1], "");

	/* Re-tag live. */
	assert_int_equal(vmm_vm_set_sandbox_id(vm2, "sbx_second", &err), 0);
	assert_int_equal(vmm_vm_set_sandbox_id(vm2, "bad\x01id", &err), -1);
	memset(&l, 0, sizeof(l));
	assert_int_equal(vmm_list_domains(f->v, collect, &l, &err), 2);
	int i2 = strcmp(l.names[0], vmm_vm_name(vm2)) == 0 ? 0 : 1;
	assert_string_equal(l.ids[i2], "sbx_second");

	/* Another daemon with the same prefix but its own run_dir (a second
	 * `make run` on the host) lists none of them, so its reconcile cannot
	 * destroy them. */
	struct vmm_config other = f->cfg;
	char other_run[300];
	snprintf(other_run, sizeof(other_run), "%s-other", f->run_dir);
	other.run_dir = other_run;
	struct vmm *v2 = vmm_new(&other, &err);
	assert_non_null(v2);
	memset(&l, 0, sizeof(l));
	assert_int_equal(vmm_list_domains(v2, collect, &l, &err), 0);
	vmm_free(v2);
	rmdir(other_run);

	/* Lookup: ours by name; not ours or unknown is NOT_FOUND. */
	struct vmm_vm *again = vmm_vm_lookup(f->v, name, &err);
	assert_non_null(again);
	assert_string_equal(vmm_vm_name(again), name);
	vmm_vm_free(again);
	sbx_error_clear(&err);
	assert_null(vmm_vm_lookup(f->v, "test", &err));
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	char unknown[80];
	snprintf(unknown, sizeof(unknown), "%s000000000000", f->cfg.name_prefix);
	sbx_error_clear(&err);
	assert_null(vmm_vm_lookup(f->v, unknown, &err));
	assert_int_equal(err.code, SBX_E_NOT_FOUND);
	assert_null(vmm_vm_lookup(f->v, "../../etc", &err));

	/* Console tail: the last bytes of the log file. */
	char p[256];
	snprintf(p, sizeof(p), "%s/%s.console.log", f->run_dir, name);
	FILE *fp = fopen(p, "w");
	assert_non_null(fp);
	fputs("early boot\nlast line\n", fp);
	fclose(fp);
	char *tail = vmm_vm_console_tail(vm, 10);
	assert_non_null(tail);
	assert_string_equal(tail, "last line\n");
	free(tail);
	assert_null(vmm_vm_console_tail(vm2, 100)); /* no log yet */

	/* Destroy: event, files gone, idempotent. */
	snprintf(p, sizeof(p), "%s/%s.qcow2", f->run_dir, name);
	touch(p);
	assert_int_equal(vmm_vm_destroy(vm, &err), 0);
	assert_false(vmm_vm_is_running(vm));
	assert_true(wait_stopped(f, name, 3000));
	assert_false(file_exists(f->run_dir, name, ".qcow2"));
	assert_false(file_exists(f->run_dir, name, ".console.log"));
	assert_int_equal(vmm_vm_destroy(vm, &err), 0);
	vmm_vm_free(vm);

	/* destroy_by_name: the second one, then again (gone is fine). */
	char name2[80];
	snprintf(name2, sizeof(name2), "%s", vmm_vm_name(vm2));
	vmm_vm_free(vm2); /* the handle only */
	assert_int_equal(vmm_destroy_by_name(f->v, name2, &err), 0);
	assert_true(wait_stopped(f, name2, 3000));
	assert_int_equal(vmm_destroy_by_name(f->v, name2, &err), 0);
	assert_int_equal(vmm_destroy_by_name(f->v, "test", &err), -1); /* not ours */

	memset(&l, 0, sizeof(l));
	assert_int_equal(vmm_list_domains(f->v, collect, &l, &err), 0);
}

static int run_qemu_img_base(const char *path)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "qemu-img create -q -f qcow2 '%s' 64M", path);
	return system(cmd);
}

static void test_overlay(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	if (run_qemu_img_base(f->base) != 0)
		skip();
	struct vmm_config c = f->cfg;
	c.base_image = f->base;
	f->v = vmm_new(&c, &err);
	assert_non_null(f->v);
	vmm_priv_set_virt_type(f->v, "test");

	struct vmm_guest_spec spec = {.vcpus = 1, .memory_mib = 128, .disk_gib = 40};
	struct vmm_vm *vm = vmm_vm_start(f->v, &spec, &err);
	assert_non_null(vm);
	const char *name = vmm_vm_name(vm);
	assert_true(file_exists(f->run_dir, name, ".qcow2"));
	char cmd[512];
	snprintf(cmd, sizeof(cmd),
		 "qemu-img info '%s/%s.qcow2' | grep -q 'virtual size: 40 GiB' && "
		 "qemu-img info '%s/%s.qcow2' | grep -q 'backing file: %s'",
		 f->run_dir, name, f->run_dir, name, f->base);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(vmm_vm_destroy(vm, &err), 0);
	assert_false(file_exists(f->run_dir, name, ".qcow2"));
	vmm_vm_free(vm);
	vmm_free(f->v);
	f->v = NULL;

	/* A base qemu-img cannot use: the start fails and leaves nothing. */
	touch(f->base); /* now an empty, non-qcow2 file */
	f->v = vmm_new(&c, &err);
	assert_non_null(f->v);
	vmm_priv_set_virt_type(f->v, "test");
	sbx_error_clear(&err);
	assert_null(vmm_vm_start(f->v, &spec, &err));
	assert_int_equal(err.code, SBX_E_SANDBOX_ERROR);
	assert_null(strstr(err.message, f->dir)); /* no host paths for tenants */
	DIR *d = opendir(f->run_dir);
	assert_non_null(d);
	int entries = 0;
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] != '.')
			entries++;
	closedir(d);
	assert_int_equal(entries, 0);
	assert_int_equal(vmm_list_domains(f->v, NULL, NULL, &err), 0);
}

static void count_snap(void *opaque, const char *id)
{
	assert_true(strncmp(id, "snap_", 5) == 0);
	(*(int *)opaque)++;
}

static void test_prune_files(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	char path[512], stale[64];
	f->v = vmm_new(&f->cfg, &err);
	assert_non_null(f->v);
	vmm_priv_set_virt_type(f->v, "test");

	struct vmm_guest_spec spec = {.vcpus = 1, .memory_mib = 128};
	struct vmm_vm *vm = vmm_vm_start(f->v, &spec, &err);
	assert_non_null(vm);
	const char *live = vmm_vm_name(vm);
	/* A running domain's files stay; a stopped one's go; others' stay. */
	snprintf(path, sizeof(path), "%s/%s.qcow2", f->run_dir, live);
	touch(path);
	snprintf(stale, sizeof(stale), "%s0123456789ab", f->cfg.name_prefix);
	static const char *const sfx[] = {".qcow2", ".sock", ".console.log", ".console.log.1"};
	for (size_t i = 0; i < 4; i++) {
		snprintf(path, sizeof(path), "%s/%s%s", f->run_dir, stale, sfx[i]);
		touch(path);
	}
	snprintf(path, sizeof(path), "%s/other-0123456789ab.qcow2", f->run_dir);
	touch(path);
	snprintf(path, sizeof(path), "%s/%s0123456789ab.txt", f->run_dir, f->cfg.name_prefix);
	touch(path);

	assert_int_equal(vmm_prune_files(f->v, &err), 4);
	for (size_t i = 0; i < 4; i++)
		assert_false(file_exists(f->run_dir, stale, sfx[i]));
	assert_true(file_exists(f->run_dir, live, ".qcow2"));
	assert_true(file_exists(f->run_dir, "other-0123456789ab", ".qcow2"));
	assert_true(file_exists(f->run_dir, stale, ".txt"));
	assert_int_equal(vmm_prune_files(f->v, &err), 0);

	assert_int_equal(vmm_vm_destroy(vm, &err), 0);
	vmm_vm_free(vm);
}

/* Snapshot files (snapshot.c: snap_ + 24 hex) are never pruned as a
 * stopped domain's, even under a prefix they start with; they are listed
 * for reconcile, and deleted by id. */
static void test_prune_keeps_snapshots(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	char path[512];
	int n = 0;
	const char *snap = "snap_0123456789abcdef01234567";

	f->cfg.name_prefix = "s";
	f->v = vmm_new(&f->cfg, &err);
	assert_non_null(f->v);
	snprintf(path, sizeof(path), "%s/%s.qcow2", f->run_dir, snap);
	touch(path);
	snprintf(path, sizeof(path), "%s/s0123456789ab.qcow2", f->run_dir);
	touch(path);
	assert_int_equal(vmm_prune_files(f->v, &err), 1);
	assert_false(file_exists(f->run_dir, "s0123456789ab", ".qcow2"));
	assert_true(file_exists(f->run_dir, snap, ".qcow2"));
	assert_int_equal(vmm_list_snapshots(f->v, count_snap, &n), 1);
	assert_int_equal(n, 1);
	vmm_snapshot_delete(f->v, "../etc/passwd"); /* not an id: nothing */
	vmm_snapshot_delete(f->v, snap);
	assert_false(file_exists(f->run_dir, snap, ".qcow2"));
	assert_int_equal(vmm_list_snapshots(f->v, count_snap, &n), 0);
}

static void test_start_refused(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	f->v = vmm_new(&f->cfg, &err);
	assert_non_null(f->v);
	/* A domain type libvirt does not know: it refuses the XML. */
	vmm_priv_set_virt_type(f->v, "nosuchtype");
	struct vmm_guest_spec spec = {.vcpus = 1, .memory_mib = 128};
	assert_null(vmm_vm_start(f->v, &spec, &err));
	assert_int_equal(err.code, SBX_E_SANDBOX_ERROR);
	assert_null(strstr(err.message, "<"));
	assert_int_equal(vmm_list_domains(f->v, NULL, NULL, &err), 0);
}

/* ----------------------------------- socket transport vs a fake qemu */

struct rx {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char data[1 << 17];
	size_t len;
	int eofs;
	atomic_int in_cb;
};

static void rx_recv(void *opaque, const void *buf, size_t len)
{
	struct rx *r = opaque;
	atomic_fetch_add(&r->in_cb, 1);
	pthread_mutex_lock(&r->lock);
	if (len == 0) {
		r->eofs++;
	} else if (r->len + len <= sizeof(r->data)) {
		memcpy(r->data + r->len, buf, len);
		r->len += len;
	}
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	atomic_fetch_sub(&r->in_cb, 1);
}

static bool rx_wait(struct rx *r, size_t len, int eofs, int ms)
{
	int64_t deadline = sbx_mono_ms() + ms;
	pthread_mutex_lock(&r->lock);
	while ((r->len < len || r->eofs < eofs) && sbx_mono_ms() < deadline) {
		pthread_mutex_unlock(&r->lock);
		usleep(1000);
		pthread_mutex_lock(&r->lock);
	}
	bool ok = r->len >= len && r->eofs >= eofs;
	pthread_mutex_unlock(&r->lock);
	return ok;
}

static int listen_at(const char *path)
{
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sun.sun_path)) {
		close(fd);
		return -1;
	}
	memcpy(sun.sun_path, path, strlen(path) + 1);
	unlink(path);
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 || listen(fd, 1) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

struct sender {
	struct sbx_channel *ch;
	const char *buf;
	size_t len;
	int rc;
};

static void *sender_main(void *arg)
{
	struct sender *s = arg;
	s->rc = s->ch->send(s->ch->ctx, s->buf, s->len);
	return NULL;
}

static void test_socket_transport(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	f->v = vmm_new(&f->cfg, &err);
	assert_non_null(f->v);
	vmm_priv_set_virt_type(f->v, "test");
	struct vmm_guest_spec spec = {.vcpus = 1, .memory_mib = 128};
	struct vmm_vm *vm = vmm_vm_start(f->v, &spec, &err);
	assert_non_null(vm);

	char path[256];
	snprintf(path, sizeof(path), "%s/%s.sock", f->run_dir, vmm_vm_name(vm));
	int lfd = listen_at(path);
	assert_true(lfd >= 0);

	struct rx *r = calloc(1, sizeof(*r));
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	struct sbx_channel ch;
	assert_int_equal(vmm_vm_open_channel(vm, rx_recv, r, &ch, &err), 0);
	int cfd = accept(lfd, NULL, NULL);
	assert_true(cfd >= 0);

	/* host -> guest, a large buffer in one send (more than the socket
	 * buffer holds, so send() must loop while the peer reads) */
	static char big[1 << 20];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 7);
	struct sender sd = {.ch = &ch, .buf = big, .len = sizeof(big)};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, sender_main, &sd), 0);
	static char got[sizeof(big)];
	size_t n = 0;
	while (n < sizeof(big)) {
		ssize_t k = read(cfd, got + n, sizeof(big) - n);
		assert_true(k > 0);
		n += (size_t)k;
	}
	pthread_join(th, NULL);
	assert_int_equal(sd.rc, 0);
	assert_memory_equal(got, big, sizeof(big));

	/* guest -> host, in order, then EOF exactly once */
	assert_int_equal(write(cfd, big, sizeof(r->data)), (ssize_t)sizeof(r->data));
	close(cfd);
	assert_true(rx_wait(r, sizeof(r->data), 1, 3000));
	assert_memory_equal(r->data, big, sizeof(r->data));
	usleep(50000);
	assert_int_equal(r->eofs, 1);
	assert_int_equal(ch.send(ch.ctx, "x", 1), -1); /* broken */
	ch.close(ch.ctx);

	/* close() while the peer is alive: returns, no EOF, no callback after */
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	assert_int_equal(vmm_vm_open_channel_via(vm, VMM_TRANSPORT_SOCKET, rx_recv, r, &ch, &err),
			 0);
	cfd = accept(lfd, NULL, NULL);
	assert_true(cfd >= 0);
	assert_int_equal(write(cfd, "hello", 5), 5);
	assert_true(rx_wait(r, 5, 0, 3000));
	ch.close(ch.ctx);
	assert_int_equal(atomic_load(&r->in_cb), 0);
	assert_int_equal(send(cfd, "late", 4, MSG_NOSIGNAL), -1); /* host side is gone */
	usleep(20000);
	assert_int_equal(r->len, 5);
	assert_int_equal(r->eofs, 0);
	close(cfd);
	close(lfd);
	free(r);

	assert_int_equal(vmm_vm_destroy(vm, &err), 0);
	vmm_vm_free(vm);
}

static void test_socket_transport_no_server(void **state)
{
	struct fx *f = *state;
	struct sbx_error err = {0};
	f->v = vmm_new(&f->cfg, &err);
	assert_non_null(f->v);
	vmm_priv_set_virt_type(f->v, "test");
	struct vmm_guest_spec spec = {.vcpus = 1, .memory_mib = 128};
	struct vmm_vm *vm = vmm_vm_start(f->v, &spec, &err);
	assert_non_null(vm);
	/* A plain file where the socket should be: refused after the bounded
	 * retry (connect() retries ECONNREFUSED while qemu starts listening). */
	char path[256];
	snprintf(path, sizeof(path), "%s/%s.sock", f->run_dir, vmm_vm_name(vm));
	touch(path);
	struct rx r = {0};
	struct sbx_channel ch;
	int64_t t0 = sbx_mono_ms();
	sbx_error_clear(&err);
	assert_int_equal(vmm_vm_open_channel(vm, rx_recv, &r, &ch, &err), -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_ERROR);
	assert_true(sbx_mono_ms() - t0 < 6000);
	/* The stream transport needs a hypervisor that has channels. */
	assert_int_equal(vmm_vm_open_channel_via(vm, VMM_TRANSPORT_STREAM, rx_recv, &r, &ch, &err),
			 -1);
	assert_int_equal(vmm_vm_destroy(vm, &err), 0);
	assert_false(file_exists(f->run_dir, vmm_vm_name(vm), ".sock"));
	vmm_vm_free(vm);
}

/* A guest that stops reading its port: every send() returns at once (it
 * queues), the channel breaks by itself once the oldest bytes wait past
 * VMM_SEND_DEADLINE_MS, and a queue past VMM_SENDQ_MAX breaks it at once. */
static void test_socket_send_never_blocks(void **state)
{
	(void)state;
	static char frame[256 * 1024];
	struct sbx_error err = {0};
	struct sbx_channel ch;
	struct rx *r = calloc(1, sizeof(*r));
	int sv[2];

	assert_non_null(r);
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	memset(frame, 'x', sizeof frame);

	/* 1. The deadline: 8 MiB queued to a peer that never reads. A
	 * blocking send would hang here once the socket buffer is full. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(vmm_chan_sock_from_fd(sv[0], "deaf", rx_recv, r, &ch, &err), 0);
	for (int i = 0; i < 32; i++)
		assert_int_equal(ch.send(ch.ctx, frame, sizeof frame), 0);
	assert_int_equal(r->eofs, 0);
	assert_true(rx_wait(r, 0, 1, VMM_SEND_DEADLINE_MS + 5000));
	assert_int_equal(ch.send(ch.ctx, "x", 1), -1); /* broken for good */
	ch.close(ch.ctx);
	assert_int_equal(r->eofs, 1);
	close(sv[1]);

	/* 2. The bound: more than VMM_SENDQ_MAX queued breaks it at once. */
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(vmm_chan_sock_from_fd(sv[0], "deaf", rx_recv, r, &ch, &err), 0);
	int rc = 0;
	for (size_t sent = 0; rc == 0 && sent <= (size_t)VMM_SENDQ_MAX + sizeof frame;
	     sent += sizeof frame)
		rc = ch.send(ch.ctx, frame, sizeof frame);
	assert_int_equal(rc, -1);
	assert_true(rx_wait(r, 0, 1, 3000));
	ch.close(ch.ctx);
	close(sv[1]);

	/* 3. A peer that reads gets every byte, in order, and no EOF. */
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(vmm_chan_sock_from_fd(sv[0], "ok", rx_recv, r, &ch, &err), 0);
	for (int i = 0; i < 4; i++) {
		memset(frame, 'a' + i, sizeof frame);
		assert_int_equal(ch.send(ch.ctx, frame, sizeof frame), 0);
	}
	static char got[4 * sizeof frame];
	size_t have = 0;
	while (have < sizeof got) {
		ssize_t n = read(sv[1], got + have, sizeof got - have);
		assert_true(n > 0);
		have += (size_t)n;
	}
	for (int i = 0; i < 4; i++)
		assert_int_equal(got[(size_t)i * sizeof frame + 7], 'a' + i);
	assert_int_equal(r->eofs, 0);
	ch.close(ch.ctx);
	close(sv[1]);
	free(r);
}

/* Which URIs name this machine, which are plain text (production refuses
 * those), and what a remote URI changes in the XML and the config. */
static void test_uris(void **state)
{
	(void)state;
	static const struct {
		const char *uri;
		bool local, plain;
	} cases[] = {
	    {"qemu:///system", true, false},
	    {"qemu:///session", true, false},
	    {"qemu+unix:///system", true, false},
	    {"test:///default", true, false},
	    {"qemu+tls://10.77.0.2/system", false, false},
	    {"qemu+tls://h2.example/system?pkipath=/etc/pki/sbx", false, false},
	    {"qemu://h2.example/system", false, false}, /* libvirt's default is tls */
	    {"qemu+ssh://root@h2/system", false, false},
	    {"qemu+libssh2://h2/system", false, false},
	    {"qemu+tcp://10.77.0.2/system", false, true},
	    {"qemu+tcp:///system", false, true},
	    {"qemu+ext://h2/system?command=/bin/nc", false, true},
	    {"qemu+tls://h2/system?no_verify=1", false, true},
	    {"qemu+tls://h2/system?pkipath=/p&no_verify=1", false, true},
	    {"qemu+tls://h2/system?no_verify=10", false, false},
	    {"qemu+unix://h2/system", false, true},
	    {"not a uri", false, true},
	    {"", false, true},
	};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
		if (vmm_uri_is_local(cases[i].uri) != cases[i].local ||
		    vmm_uri_is_plaintext(cases[i].uri) != cases[i].plain)
			fail_msg("'%s': local %d plaintext %d", cases[i].uri,
				 vmm_uri_is_local(cases[i].uri),
				 vmm_uri_is_plaintext(cases[i].uri));
	}
	assert_false(vmm_uri_is_local(NULL));
	assert_true(vmm_uri_is_plaintext(NULL));

	/* A remote host's channel socket is libvirt's to place; the console
	 * log stays in run_dir (a path on that host). */
	struct vmm_config c = xml_cfg();
	struct vmm_guest_spec s = {.vcpus = 1, .memory_mib = 256};
	char *x = vmm_domain_xml(&c, "t-vmm-0123456789ab", &s, false);
	assert_non_null(strstr(x, "<source mode='bind' path='/run/sbx/t-vmm-0123456789ab.sock'/>"));
	free(x);
	c.uri = "qemu+tls://10.77.0.2/system";
	x = vmm_domain_xml(&c, "t-vmm-0123456789ab", &s, false);
	assert_null(strstr(x, ".sock"));
	assert_null(strstr(x, "<source mode='bind'"));
	assert_non_null(strstr(x, "<channel type='unix'>\n      <target type='virtio' "
				  "name='org.sandboxd.exec.0'/>"));
	assert_non_null(strstr(x, "/run/sbx/t-vmm-0123456789ab.console.log"));
	free(x);

	/* The socket transport cannot reach a remote host: refused before
	 * any connection is tried. */
	struct sbx_error err = {0};
	c.transport = VMM_TRANSPORT_SOCKET;
	c.allow_tcg = true;
	c.accel = VMM_ACCEL_TCG;
	assert_null(vmm_new(&c, &err));
	assert_string_equal(err.param, "transport");
}

/* Bytes readable on fd within ms (0 when none came). */
static size_t drain_for(int fd, char *buf, size_t cap, int ms)
{
	size_t have = 0;
	struct pollfd p = {.fd = fd, .events = POLLIN};

	while (have < cap && poll(&p, 1, ms) == 1) {
		ssize_t n = read(fd, buf + have, cap - have);
		if (n <= 0)
			break;
		have += (size_t)n;
	}
	return have;
}

/* The credit window: after send_window, the channel writes at most the
 * window past what the peer acknowledged, whatever is queued; a credit lets
 * exactly that much more through; a credit that goes back or claims more
 * than was written is refused. */
static void test_socket_credit_window(void **state)
{
	(void)state;
	static char frame[256 * 1024], got[1024 * 1024];
	const size_t window = 64 * 1024;
	struct sbx_error err = {0};
	struct sbx_channel ch;
	struct rx *r = calloc(1, sizeof(*r));
	int sv[2];

	assert_non_null(r);
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	memset(frame, 'w', sizeof frame);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(vmm_chan_sock_from_fd(sv[0], "credit", rx_recv, r, &ch, &err), 0);
	assert_non_null(ch.send_window);
	assert_non_null(ch.credit);
	assert_int_equal(ch.credit(ch.ctx, 0), -1); /* no window yet */

	/* 10 bytes open the window at their end; 1 MiB more waits */
	assert_int_equal(ch.send_window(ch.ctx, "welcome-10", 10, window), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(ch.send(ch.ctx, frame, sizeof frame), 0);
	assert_int_equal(drain_for(sv[1], got, sizeof got, 500), 10 + window);

	/* a credit for 40 KiB lets exactly 40 KiB more through */
	assert_int_equal(ch.credit(ch.ctx, 40 * 1024), 0);
	assert_int_equal(drain_for(sv[1], got, sizeof got, 500), 40 * 1024);
	/* lies: below the last credit, or more than was written */
	assert_int_equal(ch.credit(ch.ctx, 30 * 1024), -1);
	assert_int_equal(ch.credit(ch.ctx, window + 40 * 1024 + 1), -1);
	/* all that was written: a whole window more */
	assert_int_equal(ch.credit(ch.ctx, window + 40 * 1024), 0);
	assert_int_equal(drain_for(sv[1], got, sizeof got, 500), window);

	/* window 0 lifts the limit: the rest comes */
	assert_int_equal(ch.send_window(ch.ctx, "x", 1, 0), 0);
	size_t rest = 4 * sizeof frame + 1 - 2 * window - 40 * 1024;
	assert_int_equal(drain_for(sv[1], got, sizeof got, 500), rest);
	assert_int_equal(r->eofs, 0);
	ch.close(ch.ctx);
	close(sv[1]);
	free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_xml_tcg),
	    cmocka_unit_test(test_xml_without_free_page_reporting),
	    cmocka_unit_test(test_xml_balloon_stats_period),
	    cmocka_unit_test(test_xml_snapshot_chain),
	    cmocka_unit_test(test_xml_kvm_and_tb_cache),
	    cmocka_unit_test(test_xml_cpu_bound),
	    cmocka_unit_test(test_xml_disk_only_with_base),
	    cmocka_unit_test(test_xml_escaping),
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_metadata_parse),
	    cmocka_unit_test(test_uris),
	    cmocka_unit_test_setup_teardown(test_config_errors, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_bookkeeping, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_overlay, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_prune_files, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_prune_keeps_snapshots, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_start_refused, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_socket_transport, fx_setup, fx_teardown),
	    cmocka_unit_test_setup_teardown(test_socket_transport_no_server, fx_setup, fx_teardown),
	    cmocka_unit_test(test_socket_send_never_blocks),
	    cmocka_unit_test(test_socket_credit_window),
	};
	sbx_log_set_level(SBX_LOG_ERROR + 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
