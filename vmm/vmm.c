/* vmm: guests as transient libvirt domains, and the byte channel to their
 * exec port (libvirt stream or the channel's unix socket). See vmm.h and
 * docs/vmm.md for the domain XML choices and measured figures. */
#include "vmm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "vmm-priv.h"

#define MOD	       "vmm"
#define VMM_PREFIX_MAX (VMM_NAME_MAX - 12)

extern char **environ;

/* ------------------------------------------------------- libvirt errors */

void vmm_silent_error(void *opaque, virErrorPtr e)
{
	(void)opaque;
	(void)e;
}

/* The libvirt error of this thread, for the log (never for tenants). */
const char *vmm_lv_msg(void)
{
	virErrorPtr e = virGetLastError();
	return e && e->message ? e->message : "unknown libvirt error";
}

int vmm_lv_code(void)
{
	virErrorPtr e = virGetLastError();
	return e ? e->code : VIR_ERR_OK;
}

/* Does the libvirt error of this thread mean "the host is out of
 * something" (memory, processes, a busy daemon), i.e. retry later? */
static bool vmm_lv_resource_error(void)
{
	virErrorPtr e = virGetLastError();
	if (!e)
		return false;
	if (e->code == VIR_ERR_NO_MEMORY || e->code == VIR_ERR_RESOURCE_BUSY ||
	    e->code == VIR_ERR_OPERATION_TIMEOUT || e->code == VIR_ERR_NO_CONNECT ||
	    e->code == VIR_ERR_RPC)
		return true;
	if (e->message && (strstr(e->message, "Cannot allocate memory") ||
			   strstr(e->message, "cannot set up guest memory") ||
			   strstr(e->message, "No space left on device") ||
			   strstr(e->message, "Resource temporarily unavailable")))
		return true;
	return false;
}

/* ------------------------------------------------------ the event loop */

/* libvirt's default event implementation is process-global, so one loop
 * thread serves every struct vmm in the process (refcounted). */
static pthread_mutex_t loop_lock = PTHREAD_MUTEX_INITIALIZER;
static bool loop_registered;
static unsigned loop_users;
static pthread_t loop_thread;
static atomic_bool loop_quit;

static void *vmm_loop_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&loop_quit)) {
		if (virEventRunDefaultImpl() < 0) {
			sbx_err(MOD, "event loop: %s", vmm_lv_msg());
			struct timespec ts = {0, 100 * 1000 * 1000};
			nanosleep(&ts, NULL);
		}
	}
	return NULL;
}

static void vmm_loop_wake(int timer, void *opaque)
{
	(void)opaque;
	virEventRemoveTimeout(timer);
}

static int vmm_loop_acquire(struct sbx_error *err)
{
	pthread_mutex_lock(&loop_lock);
	if (!loop_registered) {
		/* libvirt would print every error to stderr itself; we log. */
		virSetErrorFunc(NULL, vmm_silent_error);
		if (virInitialize() < 0 || virEventRegisterDefaultImpl() < 0) {
			pthread_mutex_unlock(&loop_lock);
			sbx_err(MOD, "cannot register libvirt's event loop: %s", vmm_lv_msg());
			return sbx_error_set(err, SBX_E_INTERNAL, NULL,
					     "cannot start the libvirt event loop");
		}
		loop_registered = true;
	}
	if (loop_users == 0) {
		atomic_store(&loop_quit, false);
		int r = pthread_create(&loop_thread, NULL, vmm_loop_main, NULL);
		if (r != 0) {
			pthread_mutex_unlock(&loop_lock);
			return sbx_error_set(err, SBX_E_INTERNAL, NULL,
					     "cannot start the libvirt event loop thread");
		}
	}
	loop_users++;
	pthread_mutex_unlock(&loop_lock);
	return 0;
}

static void vmm_loop_release(void)
{
	pthread_mutex_lock(&loop_lock);
	if (loop_users > 0 && --loop_users == 0) {
		atomic_store(&loop_quit, true);
		/* Adding a timeout wakes the loop's poll(); the loop then sees
		 * the flag after this iteration. */
		if (virEventAddTimeout(0, vmm_loop_wake, NULL, NULL) < 0)
			sbx_err(MOD, "cannot wake the event loop: %s", vmm_lv_msg());
		pthread_join(loop_thread, NULL);
	}
	pthread_mutex_unlock(&loop_lock);
}

/* ------------------------------------------------------------- helpers */

bool vmm_name_valid(const char *name)
{
	if (!name || !name[0] || name[0] == '.')
		return false;
	size_t n = 0;
	for (const char *p = name; *p; p++, n++) {
		char c = *p;
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
		if (!ok || n >= VMM_NAME_MAX)
			return false;
	}
	return true;
}

bool vmm_has_prefix(const struct vmm *v, const char *name)
{
	return name && strncmp(name, v->prefix, strlen(v->prefix)) == 0;
}

char *vmm_path(const char *run_dir, const char *name, const char *suffix)
{
	char *p = NULL;
	if (asprintf(&p, "%s/%s%s", run_dir, name, suffix) < 0)
		return NULL;
	return p;
}

static void vmm_unlink_files(struct vmm *v, const char *name)
{
	if (v->remote) {
		vmm_storage_delete(v, name);
		return;
	}
	static const char *const suffixes[] = {".qcow2",	 ".save",	   ".sock",
					       ".console.log",	 ".console.log.0", ".console.log.1",
					       ".console.log.2", ".console.log.3"};
	for (size_t i = 0; i < SBX_ARRAY_SIZE(suffixes); i++) {
		_cleanup_free_ char *p = vmm_path(v->run_dir, name, suffixes[i]);
		if (p && unlink(p) < 0 && errno != ENOENT)
			sbx_warn(MOD, "cannot remove '%s': %s", p, strerror(errno));
	}
}

/* The sandbox id of a domain into out; "" when it has none. */
static void vmm_dom_sandbox_id(virDomainPtr dom, char *out, size_t outlen)
{
	out[0] = '\0';
	char *xml = virDomainGetMetadata(dom, VIR_DOMAIN_METADATA_ELEMENT, VMM_METADATA_NS, 0);
	if (!xml)
		return;
	if (vmm_priv_metadata_id(xml, out, outlen) < 0)
		out[0] = '\0';
	free(xml);
}

/* ------------------------------------------------------- vmm lifecycle */

static char *vmm_strdup_opt(const char *s)
{
	return (s && s[0]) ? strdup(s) : NULL;
}

static bool vmm_kvm_usable(void)
{
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

static void vmm_free_fields(struct vmm *v)
{
	free(v->uri);
	free(v->prefix);
	free(v->kernel);
	free(v->initrd);
	free(v->base_image);
	free(v->cmdline);
	free(v->run_dir);
	free(v->virt_type);
	pthread_cond_destroy(&v->cond);
	pthread_mutex_destroy(&v->lock);
	free(v);
}

/* The config checked, the guest files readable and run_dir made: 0 with
 * *kvm_out and *remote_out set, or -1 with err set. */
static int vmm_config_check(const struct vmm_config *cfg, bool *kvm_out, bool *remote_out,
			    struct sbx_error *err)
{
	if (!cfg || !cfg->uri || !cfg->name_prefix || !cfg->kernel || !cfg->run_dir) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL,
			      "vmm config needs uri, name_prefix, kernel and run_dir");
		return -1;
	}
	size_t plen = strlen(cfg->name_prefix);
	if (plen == 0 || plen > VMM_PREFIX_MAX || !vmm_name_valid(cfg->name_prefix)) {
		sbx_error_set(err, SBX_E_INTERNAL, "name_prefix",
			      "invalid domain name prefix: use 1-%d of [A-Za-z0-9_.-]",
			      VMM_PREFIX_MAX);
		return -1;
	}
	if (cfg->cmdline && !vmm_text_valid(cfg->cmdline, 2048)) {
		sbx_error_set(err, SBX_E_INTERNAL, "cmdline",
			      "kernel command line must be printable ascii");
		return -1;
	}
	bool remote = !vmm_uri_is_local(cfg->uri);
	*remote_out = remote;
	if (remote && cfg->transport == VMM_TRANSPORT_SOCKET) {
		sbx_error_set(err, SBX_E_INTERNAL, "transport",
			      "the socket transport needs a local host; use 'stream' for '%s'",
			      cfg->uri);
		return -1;
	}
	struct sockaddr_un sun;
	if (cfg->run_dir[0] != '/' ||
	    strlen(cfg->run_dir) + 1 + plen + 12 + strlen(".sock") >= sizeof(sun.sun_path)) {
		sbx_error_set(err, SBX_E_INTERNAL, "run_dir",
			      "run_dir must be an absolute path short enough for a unix socket");
		return -1;
	}

	bool kvm;
	switch (cfg->accel) {
	case VMM_ACCEL_KVM:
		kvm = true;
		break;
	case VMM_ACCEL_TCG:
		kvm = false;
		break;
	default:
		kvm = vmm_kvm_usable();
		break;
	}
	if (!kvm && !cfg->allow_tcg) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL,
			      "tcg acceleration needed but not allowed (allow_tcg)");
		return -1;
	}
	const char *files[] = {cfg->kernel, cfg->initrd, cfg->base_image};
	const char *what[] = {"kernel", "initrd", "base_image"};
	/* A remote host's files are checked by its libvirtd at the first
	 * start; its run_dir is made as a storage pool (storage.c). */
	for (size_t i = 0; i < SBX_ARRAY_SIZE(files) && !remote; i++) {
		if (!files[i] || !files[i][0])
			continue;
		if (access(files[i], R_OK) < 0) {
			sbx_err(MOD, "%s '%s': %s", what[i], files[i], strerror(errno));
			sbx_error_set(err, SBX_E_INTERNAL, what[i], "guest %s not readable: '%s'",
				      what[i], files[i]);
			return -1;
		}
	}
	if (!remote && sbx_mkdir_p(cfg->run_dir, 0755) < 0) {
		sbx_err(MOD, "cannot create run_dir '%s': %s", cfg->run_dir, strerror(errno));
		sbx_error_set(err, SBX_E_INTERNAL, "run_dir", "cannot create run_dir");
		return -1;
	}
	*kvm_out = kvm;
	return 0;
}

/* A vmm with the config copied in, not yet connected; NULL with err set. */
static struct vmm *vmm_alloc(const struct vmm_config *cfg, bool kvm, bool remote,
			     struct sbx_error *err)
{
	struct vmm *v = calloc(1, sizeof(*v));
	if (!v) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&v->lock, NULL);
	pthread_cond_init(&v->cond, NULL);
	v->uri = strdup(cfg->uri);
	v->prefix = strdup(cfg->name_prefix);
	v->kernel = strdup(cfg->kernel);
	v->initrd = vmm_strdup_opt(cfg->initrd);
	v->base_image = vmm_strdup_opt(cfg->base_image);
	v->cmdline = vmm_strdup_opt(cfg->cmdline);
	v->run_dir = strdup(cfg->run_dir);
	v->transport = cfg->transport;
	v->tb_cache_mib = cfg->tb_cache_mib;
	v->free_page_reporting = cfg->free_page_reporting;
	v->balloon_stats_period_s = cfg->balloon_stats_period_s;
	v->console_log_max = cfg->console_log_max;
	v->kvm = kvm;
	v->remote = remote;
	v->lifecycle_id = -1;
	if (!v->uri || !v->prefix || !v->kernel || !v->run_dir ||
	    (cfg->initrd && cfg->initrd[0] && !v->initrd) ||
	    (cfg->base_image && cfg->base_image[0] && !v->base_image) ||
	    (cfg->cmdline && cfg->cmdline[0] && !v->cmdline)) {
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		vmm_free_fields(v);
		return NULL;
	}
	return v;
}

struct vmm *vmm_new(const struct vmm_config *cfg, struct sbx_error *err)
{
	bool kvm, remote;

	if (vmm_config_check(cfg, &kvm, &remote, err) < 0)
		return NULL;
	struct vmm *v = vmm_alloc(cfg, kvm, remote, err);
	if (!v)
		return NULL;

	/* The event implementation must be registered before the connection
	 * is opened. */
	if (vmm_loop_acquire(err) < 0)
		goto err_free;

	v->conn = vmm_conn_open(v, &v->lifecycle_id, &v->close_cb);
	if (!v->conn) {
		sbx_err(MOD, "cannot connect to '%s': %s", v->uri, vmm_lv_msg());
		sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
			      "the hypervisor is unreachable; try again later");
		goto err_loop;
	}
	virNodeInfo node;
	if (virNodeGetInfo(v->conn, &node) == 0)
		v->host_cpus = node.cpus;
	else
		sbx_warn(MOD, "'%s': no node info (%s): guests get no CPU bound", v->uri,
			 vmm_lv_msg());
	sbx_info(MOD, "connected to '%s', accel %s, %u host CPUs", v->uri, kvm ? "kvm" : "tcg",
		 v->host_cpus);
	if (remote)
		vmm_storage_init(v);
	vmm_stats_init(v);
	return v;

err_loop:
	vmm_loop_release();
err_free:
	vmm_free_fields(v);
	return NULL;
}

void vmm_free(struct vmm *v)
{
	bool leak = false;
	if (!v)
		return;
	/* Stop a reconnect in progress first: it swaps v->conn. */
	pthread_mutex_lock(&v->lock);
	v->closing = true;
	pthread_cond_broadcast(&v->cond);
	while (v->reconnecting)
		pthread_cond_wait(&v->cond, &v->lock);
	pthread_mutex_unlock(&v->lock);
	if (v->lifecycle_id >= 0 &&
	    virConnectDomainEventDeregisterAny(v->conn, v->lifecycle_id) == 0) {
		/* A dispatch in progress on the event thread still uses v: wait
		 * (bounded) until libvirt lets go of it. */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 5;
		pthread_mutex_lock(&v->lock);
		while (!v->lifecycle_freed)
			if (pthread_cond_timedwait(&v->cond, &v->lock, &ts) != 0)
				break;
		bool freed = v->lifecycle_freed;
		pthread_mutex_unlock(&v->lock);
		if (!freed) {
			/* Leak v rather than risk a callback on freed memory. */
			sbx_warn(MOD, "lifecycle callback still registered at vmm_free");
			leak = true;
		}
	}
	if (v->close_cb)
		virConnectUnregisterCloseCallback(v->conn, vmm_close_cb);
	virConnectClose(v->conn);
	for (size_t i = 0; i < v->n_old; i++)
		virConnectClose(v->old_conns[i]);
	vmm_loop_release();
	if (!leak)
		vmm_free_fields(v);
}

const char *vmm_accel_name(const struct vmm *v)
{
	return v->kvm ? "kvm" : "tcg";
}

void vmm_priv_set_virt_type(struct vmm *v, const char *type)
{
	pthread_mutex_lock(&v->lock);
	free(v->virt_type);
	v->virt_type = type ? strdup(type) : NULL;
	pthread_mutex_unlock(&v->lock);
}

/* ------------------------------------------------------------- domains */

static struct vmm_vm *vmm_vm_wrap(struct vmm *v, virDomainPtr dom, const char *name)
{
	struct vmm_vm *vm = calloc(1, sizeof(*vm));
	if (!vm)
		return NULL;
	vm->v = v;
	vm->dom = dom;
	snprintf(vm->name, sizeof(vm->name), "%s", name);
	pthread_mutex_lock(&v->lock);
	vm->gen = v->gen;
	vm->next = v->vms;
	v->vms = vm;
	pthread_mutex_unlock(&v->lock);
	return vm;
}

/* The handle's domain on the current connection: after a reconnect it is
 * looked up again by name (the old object stays valid until vmm_vm_free,
 * answering errors). Borrowed; NULL once the domain is known gone. */
virDomainPtr vmm_vm_dom(struct vmm_vm *vm)
{
	struct vmm *v = vm->v;

	pthread_mutex_lock(&v->lock);
	bool fresh = vm->gen == v->gen || vm->gone;
	virConnectPtr c = v->conn;
	unsigned gen = v->gen;
	virDomainPtr d = vm->gone ? NULL : vm->dom;
	pthread_mutex_unlock(&v->lock);
	if (fresh)
		return d;

	virDomainPtr nd = virDomainLookupByName(c, vm->name);
	bool no_domain = !nd && vmm_lv_code() == VIR_ERR_NO_DOMAIN;
	pthread_mutex_lock(&v->lock);
	if (nd && vm->gen != gen) {
		if (vm->n_stale == VMM_STALE_DOMS) {
			virDomainFree(vm->stale[0]);
			memmove(vm->stale, vm->stale + 1,
				sizeof(vm->stale[0]) * (VMM_STALE_DOMS - 1));
			vm->n_stale--;
		}
		vm->stale[vm->n_stale++] = vm->dom;
		vm->dom = nd;
		vm->gen = gen;
		nd = NULL;
	} else if (no_domain) {
		vm->gone = true;
	}
	d = vm->gone ? NULL : vm->dom;
	pthread_mutex_unlock(&v->lock);
	if (nd)
		virDomainFree(nd);
	return d;
}

/* qemu-img create -f qcow2 -F qcow2 -b BACKING OVERLAY <gib>G, no shell. */
static int vmm_overlay_create(const char *backing, const char *overlay, uint64_t gib)
{
	char size[32];
	snprintf(size, sizeof(size), "%lluG", (unsigned long long)gib);
	char *const argv[] = {
	    "qemu-img",	     "create",	      "-q", "-f", "qcow2", "-F", "qcow2", "-b",
	    (char *)backing, (char *)overlay, size, NULL};
	return vmm_qemu_img(argv, 0);
}

struct vmm_vm *vmm_vm_start(struct vmm *v, const struct vmm_guest_spec *spec, struct sbx_error *err)
{
	char name[VMM_NAME_MAX + 1];
	if (sbx_random_id(v->prefix, 6, name, sizeof(name)) < 0) {
		sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "could not create the sandbox");
		return NULL;
	}
	struct vmm_config cfg = {
	    .uri = v->uri,
	    .kernel = v->kernel,
	    .initrd = v->initrd,
	    .base_image = v->base_image,
	    .cmdline = v->cmdline,
	    .run_dir = v->run_dir,
	    .tb_cache_mib = v->tb_cache_mib,
	    .host_cpus = atomic_load(&v->cpu_bound_refused) ? 0 : v->host_cpus,
	    .free_page_reporting = v->free_page_reporting,
	    .balloon_stats_period_s = v->balloon_stats_period_s,
	};
	pthread_mutex_lock(&v->lock);
	_cleanup_free_ char *vt = v->virt_type ? strdup(v->virt_type) : NULL;
	pthread_mutex_unlock(&v->lock);
	_cleanup_free_ char *xml =
	    vmm_domain_xml_typed(&cfg, name, spec, vt ? vt : (v->kvm ? "kvm" : "qemu"), v->kvm);
	if (!xml) {
		sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
			      "invalid guest spec (memory, sandbox id)");
		return NULL;
	}
	bool disk = v->base_image && spec->disk_gib > 0;
	_cleanup_free_ char *overlay = NULL;
	if (disk) {
		overlay = vmm_path(v->run_dir, name, ".qcow2");
		_cleanup_free_ char *snap = spec->snapshot_id && spec->snapshot_id[0]
						? vmm_snapshot_path(v, spec->snapshot_id)
						: NULL;
		int r = !overlay || (spec->snapshot_id && spec->snapshot_id[0] &&
				     (!snap || v->remote || access(snap, R_OK) < 0))
			    ? -1
			: v->remote ? vmm_storage_overlay_create(v, name, spec->disk_gib)
				    : vmm_overlay_create(snap ? snap : v->base_image, overlay,
							 spec->disk_gib);
		if (r < 0) {
			sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
				      "could not create the sandbox's disk");
			goto err_files;
		}
	}
	int64_t t0 = sbx_mono_ms();
	virDomainPtr dom = virDomainCreateXML(vmm_conn(v), xml, 0);
	if (!dom && cfg.host_cpus >= 2 && strstr(vmm_lv_msg(), "cgroup")) {
		/* A host without the cgroup cpu controller cannot bound a
		 * guest's CPU (docs/vmm.md, "CPU bound"): say so once, and
		 * start this guest and the next without the bound. */
		if (!atomic_exchange(&v->cpu_bound_refused, true))
			sbx_warn(MOD,
				 "'%s' refused the guests' CPU bound (%s): guests run unbounded",
				 v->uri, vmm_lv_msg());
		cfg.host_cpus = 0;
		free(xml);
		xml = vmm_domain_xml_typed(&cfg, name, spec, vt ? vt : (v->kvm ? "kvm" : "qemu"),
					   v->kvm);
		dom = xml ? virDomainCreateXML(vmm_conn(v), xml, 0) : NULL;
	}
	if (!dom) {
		bool busy = vmm_lv_resource_error();
		sbx_err(MOD, "create domain '%s' failed: %s", name, vmm_lv_msg());
		if (busy)
			sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				      "the host is out of capacity; try again later");
		else
			sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
				      "the sandbox failed to start");
		goto err_files;
	}
	sbx_debug(MOD, "domain '%s' created in %lld ms", name, (long long)(sbx_mono_ms() - t0));
	struct vmm_vm *vm = vmm_vm_wrap(v, dom, name);
	if (!vm) {
		virDomainDestroy(dom);
		virDomainFree(dom);
		sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "the sandbox failed to start");
		goto err_files;
	}
	return vm;

err_files:
	vmm_unlink_files(v, name);
	return NULL;
}

struct vmm_vm *vmm_vm_lookup(struct vmm *v, const char *name, struct sbx_error *err)
{
	if (!vmm_name_valid(name) || !vmm_has_prefix(v, name)) {
		sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such guest");
		return NULL;
	}
	virDomainPtr dom = virDomainLookupByName(vmm_conn(v), name);
	if (!dom) {
		int code = vmm_lv_code();
		if (code == VIR_ERR_NO_DOMAIN) {
			sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such guest");
		} else {
			sbx_err(MOD, "lookup '%s': %s", name, vmm_lv_msg());
			sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				      "the hypervisor did not answer; try again later");
		}
		return NULL;
	}
	if (virDomainIsActive(dom) != 1) {
		virDomainFree(dom);
		sbx_error_set(err, SBX_E_NOT_FOUND, NULL, "no such guest");
		return NULL;
	}
	struct vmm_vm *vm = vmm_vm_wrap(v, dom, name);
	if (!vm) {
		virDomainFree(dom);
		sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	return vm;
}

const char *vmm_vm_name(const struct vmm_vm *vm)
{
	return vm->name;
}

int vmm_vm_set_sandbox_id(struct vmm_vm *vm, const char *sandbox_id, struct sbx_error *err)
{
	struct sbx_buf b;
	const char *md = NULL;
	sbx_buf_init(&b, 1024);
	if (sandbox_id && sandbox_id[0]) {
		if (!vmm_text_valid(sandbox_id, VMM_ID_MAX))
			return sbx_error_set(err, SBX_E_INTERNAL, "sandbox_id",
					     "sandbox id must be printable ascii, at most %d bytes",
					     VMM_ID_MAX);
		int r = sbx_buf_printf(&b, "<sandbox><id>");
		r |= vmm_xml_escape(&b, sandbox_id);
		r |= sbx_buf_printf(&b, "</id></sandbox>");
		if (r) {
			sbx_buf_release(&b);
			return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		}
		md = b.data;
	}
	virDomainPtr dom = vmm_vm_dom(vm);
	if (!dom) {
		sbx_buf_release(&b);
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "the sandbox's guest is gone");
	}
	int r = virDomainSetMetadata(dom, VIR_DOMAIN_METADATA_ELEMENT, md, md ? "sbx" : NULL,
				     VMM_METADATA_NS, VIR_DOMAIN_AFFECT_LIVE);
	sbx_buf_release(&b);
	if (r < 0) {
		sbx_err(MOD, "set metadata of '%s': %s", vm->name, vmm_lv_msg());
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
				     "could not tag the sandbox's guest");
	}
	return 0;
}

bool vmm_vm_is_running(struct vmm_vm *vm)
{
	virDomainPtr dom = vm ? vmm_vm_dom(vm) : NULL;
	return dom && virDomainIsActive(dom) == 1;
}

/* Destroy; "already gone" is success. */
static int vmm_dom_destroy(virDomainPtr dom, const char *name)
{
	if (virDomainDestroy(dom) == 0)
		return 0;
	int code = vmm_lv_code();
	if (code == VIR_ERR_NO_DOMAIN || code == VIR_ERR_OPERATION_INVALID)
		return 0;
	sbx_err(MOD, "destroy '%s': %s", name, vmm_lv_msg());
	return -1;
}

int vmm_vm_destroy(struct vmm_vm *vm, struct sbx_error *err)
{
	virDomainPtr dom = vmm_vm_dom(vm);
	if (dom && vmm_dom_destroy(dom, vm->name) < 0)
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
				     "could not stop the sandbox's guest");
	vmm_unlink_files(vm->v, vm->name);
	return 0;
}

void vmm_vm_free(struct vmm_vm *vm)
{
	if (!vm)
		return;
	pthread_mutex_lock(&vm->v->lock);
	for (struct vmm_vm **pp = &vm->v->vms; *pp; pp = &(*pp)->next) {
		if (*pp == vm) {
			*pp = vm->next;
			break;
		}
	}
	pthread_mutex_unlock(&vm->v->lock);
	for (size_t i = 0; i < vm->n_stale; i++)
		virDomainFree(vm->stale[i]);
	if (vm->dom)
		virDomainFree(vm->dom);
	free(vm);
}

char *vmm_vm_console_tail(struct vmm_vm *vm, size_t max)
{
	if (max == 0)
		return NULL;
	if (vm->v->console_log_max > 0 && max > vm->v->console_log_max)
		max = (size_t)vm->v->console_log_max;
	if (vm->v->remote)
		return vmm_storage_tail(vm->v, vm->name, max);
	_cleanup_free_ char *path = vmm_path(vm->v->run_dir, vm->name, ".console.log");
	if (!path)
		return NULL;
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return NULL;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
		return NULL;
	size_t want = (size_t)st.st_size < max ? (size_t)st.st_size : max;
	off_t off = st.st_size - (off_t)want;
	char *buf = malloc(want + 1);
	if (!buf)
		return NULL;
	size_t got = 0;
	while (got < want) {
		ssize_t n = pread(fd, buf + got, want - got, off + (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got == 0) {
		free(buf);
		return NULL;
	}
	buf[got] = '\0';
	return buf;
}

/* A domain with our prefix may still be another daemon's (two daemons on
 * one host with the same prefix, e.g. two `make run`s with other state
 * dirs): ours have their console log in our run_dir. */
static bool vmm_dom_is_ours(struct vmm *v, virDomainPtr dom, const char *name)
{
	_cleanup_free_ char *log = vmm_path(v->run_dir, name, ".console.log'");
	_cleanup_free_ char *xml = virDomainGetXMLDesc(dom, 0);

	return log && xml && strstr(xml, log) != NULL;
}

int vmm_list_domains(struct vmm *v, vmm_domain_fn fn, void *opaque, struct sbx_error *err)
{
	virDomainPtr *doms = NULL;
	int n = virConnectListAllDomains(vmm_conn(v), &doms, VIR_CONNECT_LIST_DOMAINS_ACTIVE);
	if (n < 0) {
		sbx_err(MOD, "list domains: %s", vmm_lv_msg());
		return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				     "the hypervisor did not answer; try again later");
	}
	int count = 0;
	for (int i = 0; i < n; i++) {
		const char *name = virDomainGetName(doms[i]);
		if (vmm_has_prefix(v, name) && vmm_name_valid(name) &&
		    vmm_dom_is_ours(v, doms[i], name)) {
			char id[VMM_ID_MAX + 1];
			vmm_dom_sandbox_id(doms[i], id, sizeof(id));
			if (fn)
				fn(opaque, name, id);
			count++;
		}
		virDomainFree(doms[i]);
	}
	free(doms);
	return count;
}

int vmm_destroy_by_name(struct vmm *v, const char *name, struct sbx_error *err)
{
	if (!vmm_name_valid(name) || !vmm_has_prefix(v, name))
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "not a domain of ours");
	virDomainPtr dom = virDomainLookupByName(vmm_conn(v), name);
	if (!dom) {
		if (vmm_lv_code() != VIR_ERR_NO_DOMAIN) {
			sbx_err(MOD, "lookup '%s': %s", name, vmm_lv_msg());
			return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
					     "the hypervisor did not answer; try again later");
		}
	} else {
		int r = vmm_dom_destroy(dom, name);
		virDomainFree(dom);
		if (r < 0)
			return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
					     "could not stop the sandbox's guest");
	}
	vmm_unlink_files(v, name);
	return 0;
}

static int vmm_name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Is `file` in run_dir one vmm_unlink_files() would delete for a name of
 * ours whose domain is not in `live` (sorted, n names)? */
static bool vmm_prunable(struct vmm *v, const char *file, char **live, int n)
{
	char name[NAME_MAX + 1];
	const char *dot = strchr(file, '.');
	if (!dot || dot == file || (size_t)(dot - file) >= sizeof(name))
		return false;
	memcpy(name, file, (size_t)(dot - file));
	name[dot - file] = '\0';
	if (!vmm_has_prefix(v, name) || !vmm_name_valid(name))
		return false;
	/* a snapshot's file ("snap_" + 24 hex; snapshot.c), whatever the
	 * prefix: reconcile keeps or deletes those by their rows */
	if (strncmp(name, "snap_", 5) == 0 && strlen(name) == 29)
		return false;
	if (strcmp(dot, ".qcow2") != 0 && strcmp(dot, ".sock") != 0 && strcmp(dot, ".save") != 0 &&
	    strncmp(dot, ".console.log", 12) != 0)
		return false;
	const char *key = name;
	return !(n > 0 && bsearch(&key, live, (size_t)n, sizeof(*live), vmm_name_cmp));
}

struct saved_names {
	char **names;
	int n, cap;
};

static void saved_add(void *opaque, const char *name)
{
	struct saved_names *sn = opaque;

	if (sn->n == sn->cap) {
		char **nn = realloc(sn->names, sizeof(*nn) * (size_t)(sn->cap * 2));
		if (!nn)
			return;
		sn->names = nn;
		sn->cap *= 2;
	}
	sn->names[sn->n] = strdup(name);
	if (sn->names[sn->n])
		sn->n++;
}

int vmm_prune_files(struct vmm *v, struct sbx_error *err)
{
	virDomainPtr *doms = NULL;
	char **live = NULL;
	int n, removed = 0;
	DIR *d;

	n = virConnectListAllDomains(vmm_conn(v), &doms, VIR_CONNECT_LIST_DOMAINS_ACTIVE);
	if (n < 0) {
		sbx_err(MOD, "list domains: %s", vmm_lv_msg());
		return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				     "the hypervisor did not answer; try again later");
	}
	live = calloc((size_t)n + 1, sizeof(*live));
	for (int i = 0; i < n; i++) {
		if (live)
			live[i] = strdup(virDomainGetName(doms[i]));
		virDomainFree(doms[i]);
	}
	free(doms);
	if (!live)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	for (int i = 0; i < n; i++)
		if (!live[i])
			live[i] = strdup("");
	/* a paused guest's files (its save file names it) are kept too */
	struct saved_names sn = {.names = live, .n = n, .cap = n + 1};
	if (vmm_list_saved(v, saved_add, &sn) < 0) {
		for (int i = 0; i < sn.n; i++)
			free(sn.names[i]);
		free(sn.names);
		return sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				     "the hypervisor did not answer; try again later");
	}
	live = sn.names;
	n = sn.n;
	qsort(live, (size_t)n, sizeof(*live), vmm_name_cmp);

	if (v->remote) {
		removed = vmm_storage_prune(v, vmm_prunable, live, n);
		if (removed < 0)
			sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				      "the hypervisor did not answer; try again later");
		goto out;
	}
	d = opendir(v->run_dir);
	if (!d) {
		removed = errno == ENOENT ? 0
					  : sbx_error_set(err, SBX_E_INTERNAL, "run_dir",
							  "cannot read run_dir");
		goto out;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!vmm_prunable(v, de->d_name, live, n))
			continue;
		_cleanup_free_ char *p = vmm_path(v->run_dir, de->d_name, "");
		if (p && unlink(p) == 0) {
			sbx_info(MOD, "removed stale '%s' (domain not running)", de->d_name);
			removed++;
		}
	}
	closedir(d);
out:
	for (int i = 0; i < n; i++)
		free(live[i]);
	free(live);
	return removed;
}

int vmm_vm_open_channel_via(struct vmm_vm *vm, enum vmm_transport t, sbx_recv_fn recv, void *opaque,
			    struct sbx_channel *out, struct sbx_error *err)
{
	if (!vm || !recv || !out)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "invalid channel arguments");
	if (t == VMM_TRANSPORT_SOCKET) {
		char path[PATH_MAX];
		if (vm->v->remote)
			return sbx_error_set(err, SBX_E_INTERNAL, NULL,
					     "the socket transport needs a local host");
		int len = snprintf(path, sizeof(path), "%s/%s.sock", vm->v->run_dir, vm->name);

		if (len < 0 || (size_t)len >= sizeof(struct sockaddr_un) - sizeof(sa_family_t))
			return sbx_error_set(err, SBX_E_INTERNAL, NULL,
					     "channel socket path too long");
		return vmm_chan_sock_open(path, vm->name, recv, opaque, out, err);
	}
	virDomainPtr dom = vmm_vm_dom(vm);
	return vmm_chan_stream_open(vmm_conn(vm->v), dom, VMM_PORT_NAME, vm->name, recv, opaque,
				    out, err);
}

int vmm_vm_open_channel(struct vmm_vm *vm, sbx_recv_fn recv, void *opaque, struct sbx_channel *out,
			struct sbx_error *err)
{
	return vmm_vm_open_channel_via(vm, vm->v->transport, recv, opaque, out, err);
}
