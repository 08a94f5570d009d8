/* vmm: test-only entry points (libvirt's *priv.h convention). Not for
 * production code. */
#ifndef SBX_VMM_PRIV_H
#define SBX_VMM_PRIV_H

#include <stdbool.h>
#include <stddef.h>

#include "vmm.h"

/* Longest domain name vmm accepts (prefix + 12 hex digits must fit). */
#define VMM_NAME_MAX 64

/* A domain name vmm would use or accept: 1..VMM_NAME_MAX bytes of
 * [A-Za-z0-9_.-], not starting with '.'. */
bool vmm_name_valid(const char *name);

/* Make vmm_vm_start() emit <domain type='TYPE'> (e.g. "test" for libvirt's
 * test:///default driver) instead of kvm/qemu. `type` is copied; NULL
 * restores the normal behaviour. */
void vmm_priv_set_virt_type(struct vmm *v, const char *type);

/* The sandbox id inside a <metadata> element as libvirt returns it from
 * virDomainGetMetadata(), unescaped into out (outlen bytes). 0, or -1 when
 * there is no id element or it does not fit. */
int vmm_priv_metadata_id(const char *xml, char *out, size_t outlen);

/* run_dir/NAME+suffix, malloc'd (NULL on ENOMEM). */
char *vmm_path(const char *run_dir, const char *name, const char *suffix);
/* Run qemu-img with argv (argv[0] "qemu-img"; stdin and stdout
 * /dev/null), no shell, and wait at most timeout_ms (0: no bound): 0, -1
 * (it failed or could not run; logged), or -2 (killed at the deadline). */
int vmm_qemu_img(char *const argv[], uint32_t timeout_ms);

/* ---- shared by vmm.c, xml.c, conn.c, storage.c and channel.c (not for
 * other modules) ---- */
#ifdef LIBVIRT_H
#include <pthread.h>
#include <stdatomic.h>

/* The guest's exec port; equals WIRE_PORT_NAME in agentless/wire.h, which
 * vmm/ may not include (layering; tests/unit/test_vmm.c checks they agree). */
#define VMM_PORT_NAME "org.sandboxd.exec.0"
/* Longest sandbox id vmm puts in a domain's metadata. */
#define VMM_ID_MAX 128

/* Connection bookkeeping limits (struct vmm below). */
#define VMM_OLD_CONNS  16
#define VMM_STALE_DOMS 4

struct vmm {
	char *uri;
	char *prefix;
	char *kernel;
	char *initrd;
	char *base_image; /* NULL when no disk */
	char *cmdline;	  /* NULL when none */
	char *run_dir;
	char *virt_type; /* test override, NULL normally */
	enum vmm_transport transport;
	unsigned tb_cache_mib;
	unsigned host_cpus; /* virNodeGetInfo at vmm_new; 0 when unknown */
	/* the host refused <cputune> (no cgroup cpu controller): no CPU
	 * bound from then on (vmm_vm_start) */
	atomic_bool cpu_bound_refused;
	bool free_page_reporting;
	unsigned balloon_stats_period_s;
	uint64_t console_log_max;
	bool kvm;
	/* Not this machine's hypervisor (vmm_uri_is_local false): run_dir is
	 * a path on that host, reached only through libvirt (storage.c). */
	bool remote;
	char pool_name[VMM_NAME_MAX + 1]; /* the dir pool at run_dir (remote) */
	/* Statistics are read from this host (vmm_vm_stats): false for a
	 * remote host when the libvirt client library has CVE-2024-4418 (set
	 * at vmm_new, stats.c "A libvirt client bug"). */
	bool stats_ok;

	pthread_mutex_t lock; /* guards the fields below */
	pthread_cond_t cond;
	/* The connection in use; replaced (never freed before vmm_free) when
	 * libvirtd goes away and comes back: read it with vmm_conn(). */
	virConnectPtr conn;
	int lifecycle_id;
	bool close_cb;
	unsigned gen;				/* bumps at every reconnect */
	bool reconnecting;			/* the reconnect thread runs */
	bool closing;				/* vmm_free started: stop reconnecting */
	virConnectPtr old_conns[VMM_OLD_CONNS]; /* dead ones, closed in vmm_free */
	size_t n_old;
	struct vmm_vm *vms;   /* every handle, to check them after a reconnect */
	bool lifecycle_freed; /* libvirt dropped our lifecycle callback */
	vmm_stopped_fn stopped_fn;
	void *stopped_opaque;
	/* With a lost callback set, a closed connection stays closed (`lost`)
	 * until the caller's vmm_reconnect(); without one, conn.c reconnects
	 * by itself. */
	vmm_conn_lost_fn lost_fn;
	void *lost_opaque;
	bool lost;
};

struct vmm_vm {
	struct vmm *v;
	char name[VMM_NAME_MAX + 1];
	/* Under v->lock: the domain on connection generation `gen` (looked
	 * up again by name after a reconnect, see vmm_vm_dom()), domain
	 * objects of dead connections kept until vmm_vm_free (another thread
	 * may still be using one), and `gone` once a lookup said no domain. */
	virDomainPtr dom;
	unsigned gen;
	bool gone;
	virDomainPtr stale[VMM_STALE_DOMS];
	size_t n_stale;
	struct vmm_vm *next;
};

/* Append s to b with the five XML special characters escaped. */
int vmm_xml_escape(struct sbx_buf *b, const char *s);
/* Printable ASCII only, at most `max` bytes (what we put in XML text must
 * be valid XML 1.0 and a sandbox id must survive a round trip through
 * libvirt unchanged). */
bool vmm_text_valid(const char *s, size_t max);
/* vmm_domain_xml with the <domain type='...'> given (xml.c). */
char *vmm_domain_xml_typed(const struct vmm_config *cfg, const char *name,
			   const struct vmm_guest_spec *spec, const char *virt_type, bool kvm);
/* libvirt's error func: we log ourselves. */
void vmm_silent_error(void *opaque, virErrorPtr e);
/* The libvirt error code of this thread. */
int vmm_lv_code(void);
/* Does `name` start with the configured domain-name prefix? */
bool vmm_has_prefix(const struct vmm *v, const char *name);
/* Open a connection to v->uri with our error func, lifecycle and close
 * callbacks and keepalive. NULL when libvirtd does not answer. */
virConnectPtr vmm_conn_open(struct vmm *v, int *lifecycle_id, bool *close_cb);
/* libvirt's close callback (vmm_free unregisters it). */
void vmm_close_cb(virConnectPtr conn, int reason, void *opaque);

/* snapshot.c: run_dir/SNAP_ID.qcow2 (malloc'd), or NULL for an id that is
 * not "snap_" and lowercase hex. */
char *vmm_snapshot_path(const struct vmm *v, const char *snap_id);

/* storage.c: run_dir on a remote host as a libvirt `dir` pool. */
/* Our pools are named VMM_POOL_PREFIX + 16 hex digits (of run_dir). */
#define VMM_POOL_PREFIX "sandboxd-run-"

/* Set v->pool_name from run_dir. */
void vmm_storage_init(struct vmm *v);

/* stats.c: whether this host's statistics are read (vmm_stats_ok). */
void vmm_stats_init(struct vmm *v);
/* Create run_dir/NAME.qcow2 (qcow2 over the base image, `gib` GiB) as a
 * volume of the pool (started, and built, first when missing). 0 or -1. */
int vmm_storage_overlay_create(struct vmm *v, const char *name, uint64_t gib);
/* The run_dir pool, started (NULL when libvirt refused). Caller frees. */
virStoragePoolPtr vmm_storage_pool(struct vmm *v);
/* Delete the volume NAME+suffix. */
void vmm_storage_delete_file(struct vmm *v, const char *name, const char *suffix);
/* Delete the volumes of `name` (overlay, save file, console logs). */
void vmm_storage_delete(struct vmm *v, const char *name);
/* The last `max` bytes of run_dir/NAME.console.log, downloaded. */
char *vmm_storage_tail(struct vmm *v, const char *name, size_t max);
/* Delete the volumes of names of ours not in `live` (sorted, n names) and
 * for which keep(name) is false. The count, or -1 (pool unreachable). */
int vmm_storage_prune(struct vmm *v,
		      bool (*prunable)(struct vmm *v, const char *file, char **live, int n),
		      char **live, int n);
/* The libvirt error of this thread, for the log (never for tenants). */
const char *vmm_lv_msg(void);
/* The connection in use (replaced after a reconnect). */
virConnectPtr vmm_conn(struct vmm *v);
/* The handle's domain on the current connection (borrowed), NULL once it
 * is known gone. */
virDomainPtr vmm_vm_dom(struct vmm_vm *vm);
/* Open the exec channel `port` of `dom` as a libvirt stream. */
int vmm_chan_stream_open(virConnectPtr conn, virDomainPtr dom, const char *port, const char *name,
			 sbx_recv_fn recv, void *opaque, struct sbx_channel *out,
			 struct sbx_error *err);
#endif
/* Connect to a guest's channel socket at `path` (retrying while qemu has
 * not bound it yet); `name` is for the log. */
int vmm_chan_sock_open(const char *path, const char *name, sbx_recv_fn recv, void *opaque,
		       struct sbx_channel *out, struct sbx_error *err);

/* The socket transport over an already connected stream socket `fd`
 * (owned from now on, closed on error too): for tests with a socketpair.
 * Unlike vmm_chan_sock_open's, it has the credit window ops (send_window,
 * credit) the stream transport has, so the window can be tested here. */
int vmm_chan_sock_from_fd(int fd, const char *name, sbx_recv_fn recv, void *opaque,
			  struct sbx_channel *out, struct sbx_error *err);

#endif
