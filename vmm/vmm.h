/* vmm: the only code that speaks libvirt. Knows guests, domains, overlays
 * and channels; knows nothing of accounts, money or the exec protocol.
 *
 * A guest is a transient libvirt domain (virDomainCreateXML) with a
 * daemon-chosen name "<prefix><12 hex>" (a warm pool hands out pre-booted
 * domains, so the name is not the sandbox id); the sandbox id, when the
 * guest has one, lives in the domain's <metadata> (namespace
 * VMM_METADATA_NS) so a restarted daemon can reconcile.
 *
 * Threads: vmm_new() starts one thread running libvirt's default event
 * loop (lifecycle events, stream callbacks, the close callback). A lost
 * connection is reopened on a thread of vmm's own (no lost callback set)
 * or by vmm_reconnect(), whose connect runs on a short-lived thread so its
 * bound holds. All functions are thread-safe; vmm's one lock (struct vmm's)
 * is never held across a libvirt call or a callback.
 *
 * Remote hosts (vmm_uri_is_local false; docs/vmm.md, "Remote hosts"):
 * paths in the config are the host's, overlays and console logs are
 * volumes of a libvirt storage pool at run_dir, channels are streams.
 */
#ifndef SBX_VMM_H
#define SBX_VMM_H

#include <stdbool.h>
#include <stdint.h>

#include "../util/util.h"

#define VMM_METADATA_NS "https://sandboxd.dev/xmlns/domain/1"

struct vmm;
struct vmm_vm;

enum vmm_accel {
	VMM_ACCEL_AUTO, /* kvm when /dev/kvm exists, else tcg if allowed */
	VMM_ACCEL_KVM,
	VMM_ACCEL_TCG,
};

enum vmm_transport {
	/* virDomainOpenChannel(): a virStream through libvirt's connection,
	 * driven by the event loop; works for remote hosts too. Its channel
	 * has the credit window ops (sbx_channel.send_window, .credit), so
	 * libvirtd never holds more for a guest than the window. */
	VMM_TRANSPORT_STREAM,
	/* The daemon connect()s to the channel's unix socket itself
	 * (local hosts only), one reader thread per guest; no window. */
	VMM_TRANSPORT_SOCKET,
};

/* The exec channel's send() never blocks: it queues. Bytes the guest has
 * not read VMM_SEND_DEADLINE_MS after they were queued, or a queue that
 * would pass VMM_SENDQ_MAX bytes (more than a guest can have in flight
 * legitimately: 64 execs of the largest frame), break the channel: its
 * recv gets EOF on the channel's own thread (docs/protocol.md). */
#define VMM_SEND_DEADLINE_MS 10000
#define VMM_SENDQ_MAX	     (80 * 1024 * 1024)

struct vmm_config {
	const char *uri;	 /* "qemu:///system" */
	const char *name_prefix; /* domain names start with it, e.g. "sbx-" */
	enum vmm_accel accel;
	bool allow_tcg;		/* TCG is no security boundary: off in production */
	const char *kernel;	/* path to the guest kernel (PVH vmlinux or bzImage) */
	const char *initrd;	/* path to the initramfs */
	const char *base_image; /* qcow2 base for root disks; NULL/"" = no disk */
	const char *cmdline;	/* extra kernel command-line words, may be NULL */
	const char *run_dir;	/* overlays, channel sockets, console logs; must
				 * be readable by qemu (libvirt-qemu), not /root.
				 * For a remote uri: a path on that host, made
				 * a libvirt dir pool by vmm (docs/vmm.md) */
	enum vmm_transport transport;
	unsigned tb_cache_mib;	  /* TCG translation cache, 0 = qemu default */
	bool free_page_reporting; /* virtio balloon that only reports freed
				   * pages to the host (docs/vmm.md) */
	/* With the balloon: QEMU asks the guest's balloon driver for its
	 * memory statistics every this many seconds (<stats period>; what
	 * vmm_vm_stats reads as guest-reported memory). 0 = never. */
	unsigned balloon_stats_period_s;
	uint64_t console_log_max; /* bytes of guest console kept per domain */
	/* The host's CPUs (vmm_new asks the host's libvirtd; a caller of
	 * vmm_domain_xml sets it). From 2 up, every guest's threads together
	 * (vCPUs and emulator) get at most host_cpus - 1 CPUs' worth of time:
	 * <cputune> global_period/global_quota (docs/vmm.md, "CPU bound").
	 * 0 or 1: no bound. */
	unsigned host_cpus;
};

/* What one guest looks like. */
struct vmm_guest_spec {
	unsigned vcpus;
	uint64_t memory_mib;
	uint64_t disk_gib;	/* virtual size of the overlay; 0 = no disk */
	const char *sandbox_id; /* for <metadata>; NULL or "" for none */
	/* A template: the overlay is backed by this snapshot's file
	 * (vmm_snapshot_take) instead of the base image; NULL or "" for the
	 * base. Local hosts only. */
	const char *snapshot_id;
};

/* Connect to libvirt and start the event-loop thread. NULL with
 * SBX_E_SERVICE_UNAVAILABLE (libvirt unreachable) or SBX_E_INTERNAL (bad
 * config: TCG needed but not allowed, kernel missing). */
struct vmm *vmm_new(const struct vmm_config *cfg, struct sbx_error *err);
/* Stop the event loop and disconnect. Guests keep running. Call after every
 * vmm_vm was freed. */
void vmm_free(struct vmm *v);

/* The accelerator vmm_new() settled on: "kvm" or "tcg" (borrowed). */
const char *vmm_accel_name(const struct vmm *v);

/* The domain XML for `name` (pure function, for tests and the bench).
 * `kvm` picks <domain type='kvm'> vs 'qemu'. Caller frees. NULL on ENOMEM
 * or an invalid name, or when spec->memory_mib is 0, the sandbox id is not
 * printable ASCII of at most 128 bytes, or cfg->cmdline is not printable
 * ASCII (XML 1.0 cannot carry control characters; ids must round-trip). */
char *vmm_domain_xml(const struct vmm_config *cfg, const char *name,
		     const struct vmm_guest_spec *spec, bool kvm);

/* Boot a new guest: make its overlay (qemu-img create -b base, when a base
 * image is configured; on a remote host a volume of the run_dir pool), define and start a transient
 * domain. Returns without waiting for the guest to be ready. NULL with SBX_E_SERVICE_UNAVAILABLE
 * (libvirt refused: out of resources) or SBX_E_SANDBOX_ERROR. Nothing is left behind on failure. */
struct vmm_vm *vmm_vm_start(struct vmm *v, const struct vmm_guest_spec *spec,
			    struct sbx_error *err);

/* Find a running domain of ours by name (after a daemon restart). NULL
 * with SBX_E_NOT_FOUND when it does not run. */
struct vmm_vm *vmm_vm_lookup(struct vmm *v, const char *name, struct sbx_error *err);

/* The domain name (borrowed, lives as long as vm). */
const char *vmm_vm_name(const struct vmm_vm *vm);

/* Set/replace the sandbox id in the domain's <metadata> (live); NULL or ""
 * removes it. 0 or -1. */
int vmm_vm_set_sandbox_id(struct vmm_vm *vm, const char *sandbox_id, struct sbx_error *err);

/* Open the byte channel to the guest's exec port (WIRE_PORT_NAME) with the
 * configured transport. `recv` gets every chunk the guest writes (see
 * util.h). The caller owns *out and must call out->close. 0 or -1. */
int vmm_vm_open_channel(struct vmm_vm *vm, sbx_recv_fn recv, void *opaque, struct sbx_channel *out,
			struct sbx_error *err);
/* Same with an explicit transport (for the bench). */
int vmm_vm_open_channel_via(struct vmm_vm *vm, enum vmm_transport t, sbx_recv_fn recv, void *opaque,
			    struct sbx_channel *out, struct sbx_error *err);

/* Is the domain still running? */
bool vmm_vm_is_running(struct vmm_vm *vm);

/* What the host sees of a running guest (vmm_vm_stats). */
struct vmm_vm_stats {
	/* Host-observed: the CPU time every thread of the domain (vCPUs and
	 * emulator) used since it started, in ns. */
	bool has_cpu;
	uint64_t cpu_ns;
	/* Guest-reported, through the balloon's statistics (vmm_config's
	 * balloon_stats_period_s): the guest's MemTotal and MemAvailable
	 * (usable; MemFree when the driver gives no usable figure) in KiB,
	 * and the host's epoch second QEMU last received them (0: never).
	 * has_memory false: no balloon, or the guest never reported. A hostile
	 * guest reports what it likes: only ever shown, marked as its own. */
	bool has_memory;
	uint64_t memory_total_kib, memory_available_kib;
	int64_t memory_reported_s;
	/* Host-observed: the bytes the guest's root disk (its overlay)
	 * takes on the host's storage. has_disk false: no disk. */
	bool has_disk;
	uint64_t disk_bytes;
};

/* Read a running guest's CPU time, balloon statistics and disk use in
 * one libvirt call (virDomainListGetStats). Blocking: call with no lock
 * held, off any request's thread; like every libvirt call it is bounded
 * by the connection's keepalive (VMM_KEEPALIVE_BOUND_MS, below: a host
 * that stops answering closes the connection and the call fails), and a
 * connection known lost fails at once. 0, or -1 with
 * SBX_E_SERVICE_UNAVAILABLE (no connection, no answer, or no statistics
 * from this host: vmm_stats_ok) or SBX_E_SANDBOX_ERROR (the domain is
 * gone). */
int vmm_vm_stats(struct vmm_vm *vm, struct vmm_vm_stats *out, struct sbx_error *err);

/* Whether vmm_vm_stats reads this host at all: not a remote host's while
 * the libvirt client library is older than 10.3.0. Such a library frees
 * a call's stack frame with an event source still pointing at it when a
 * call waits across a keepalive tick (CVE-2024-4418): a later call on the
 * connection then crashes the daemon. Calls made while a link is down
 * are what plant it, and a sampler makes one per guest per period. */
bool vmm_stats_ok(const struct vmm *v);

/* Destroy the domain (if it still runs) and delete its overlay, socket and
 * console log (on a remote host: its volumes). Idempotent. 0, or -1 when libvirt could not destroy
 * it. */
int vmm_vm_destroy(struct vmm_vm *vm, struct sbx_error *err);

/* ---- pause and resume (save.c; docs/lifecycle.md "Pause and resume") ----
 * Save the guest's memory and device state to run_dir/NAME.save (0600,
 * beside its overlay; virDomainSave): the domain stops and is gone, its
 * files stay. *bytes (may be NULL) gets the host-observed size of the save
 * file and the overlay. Blocking (the guest's RAM is written). 0, or -1
 * with SBX_E_INSUFFICIENT_STORAGE (disk full), SBX_E_SERVICE_UNAVAILABLE
 * or SBX_E_SANDBOX_ERROR; on failure the domain runs on (libvirt resumes
 * it) and no save file is left. A save not done within timeout_ms (0:
 * none) is aborted (virDomainAbortJob, from a watchdog thread, again
 * every 250 ms until the call returns): -1 with SBX_E_SERVICE_UNAVAILABLE,
 * the domain running on; a save libvirt finishes anyway (an abort that
 * came before QEMU's migration to the file began) is 0, done. */
int vmm_vm_save(struct vmm_vm *vm, uint32_t timeout_ms, int64_t *bytes, struct sbx_error *err);
/* Start domain `name` again from its save file (virDomainRestore: same
 * name and XML), then delete the file. A handle, or NULL with err (the
 * file is kept: still paused). A domain already running (an earlier
 * restore whose answer was lost) is returned as is. A restore not done
 * within timeout_ms (0: none) is ended (its domain destroyed, the file
 * kept): NULL with *timed_out (may be NULL) true. */
struct vmm_vm *vmm_vm_restore(struct vmm *v, const char *name, uint32_t timeout_ms, bool *timed_out,
			      struct sbx_error *err);
/* 1 when `name` has a save file (a paused guest), 0 when not, -1 unknown. */
int vmm_saved(struct vmm *v, const char *name);
/* Host-observed bytes of name's save file and overlay; -1 unknown. */
int64_t vmm_saved_bytes(struct vmm *v, const char *name);
/* Delete name's save file only. */
void vmm_saved_delete(struct vmm *v, const char *name);
/* fn(opaque, name) for each name of ours with a save file; the count or
 * -1 (run_dir or the pool unreadable). vmm_prune_files keeps their files;
 * vmm_destroy_by_name deletes them. */
int vmm_list_saved(struct vmm *v, void (*fn)(void *opaque, const char *name), void *opaque);

/* ---- disk snapshots (snapshot.c; docs/lifecycle.md "Snapshots and
 * templates") ----
 * Write run_dir/SNAP_ID.qcow2 (snap_id: "snap_" and lowercase hex; mode
 * 0600): the disk of domain `domain` (its overlay, and the snapshot it was
 * made from) flattened onto the base image, its only backing. `running`:
 * the domain runs and is suspended for the copy, resumed after; else its
 * overlay is quiescent (a paused sandbox's). A copy not done within
 * timeout_ms (0: none) is killed. *bytes (may be NULL): the file's
 * host-observed size. Blocking (the copy): no lock held. 0, or -1 with
 * SBX_E_INVALID_REQUEST (a remote host, no disk), SBX_E_SERVICE_UNAVAILABLE
 * (no suspend, past the deadline) or SBX_E_SANDBOX_ERROR; no file is left
 * on failure. */
int vmm_snapshot_take(struct vmm *v, const char *domain, bool running, const char *snap_id,
		      uint32_t timeout_ms, int64_t *bytes, struct sbx_error *err);
/* Resume domain `name` when it is suspended by a client (a snapshot's
 * copy that a daemon crash cut: nothing else of ours suspends): 1 when
 * resumed, 0 when it was not suspended (or is gone), -1 when libvirt
 * refused. For reconcile, before a reattach. */
int vmm_resume_suspended(struct vmm *v, const char *name);
/* Delete snap_id's file (idempotent). */
void vmm_snapshot_delete(struct vmm *v, const char *snap_id);
/* fn(opaque, snap_id) for each snapshot file in run_dir (none on a remote
 * host); the count, or -1 (run_dir unreadable). */
int vmm_list_snapshots(struct vmm *v, void (*fn)(void *opaque, const char *snap_id), void *opaque);

/* Free the handle only; the domain keeps running. */
void vmm_vm_free(struct vmm_vm *vm);

/* The last `max` bytes of the guest's serial console (for logs on a failed
 * boot; on a remote host downloaded through the storage pool, blocking on
 * libvirt). Caller frees; NULL when there is none. */
char *vmm_vm_console_tail(struct vmm_vm *vm, size_t max);

/* Called from the event-loop thread when a domain of ours stops for any
 * reason (destroyed, crashed, guest PID 1 died -> panic=-1 -> reboot ->
 * destroy). `name` is borrowed. It may be called more than once for one
 * domain: libvirt's SHUTDOWN (or CRASHED) event comes first and STOPPED
 * follows (measured: ~1.6 s later for a guest panic, during which
 * vmm_vm_is_running() still says true), so be idempotent. Do not block in
 * it: it delays every channel's delivery. */
typedef void (*vmm_stopped_fn)(void *opaque, const char *name);
void vmm_set_stopped_callback(struct vmm *v, vmm_stopped_fn fn, void *opaque);

/* Each running domain of this daemon (name starts with the configured
 * prefix and its exec channel lives in our run_dir, so another daemon
 * sharing the prefix is left alone):
 * fn(opaque, name, sandbox_id or "" when none). Returns the count or -1. */
typedef void (*vmm_domain_fn)(void *opaque, const char *name, const char *sandbox_id);
int vmm_list_domains(struct vmm *v, vmm_domain_fn fn, void *opaque, struct sbx_error *err);

/* Destroy a domain of ours by name and delete its files (for reconcile and
 * test cleanup). 0 (also when it was already gone) or -1. */
int vmm_destroy_by_name(struct vmm *v, const char *name, struct sbx_error *err);

/* ---- the connection (docs/vmm.md, "Remote hosts") ----
 * libvirt keepalive: a connection whose peer does not answer
 * VMM_KEEPALIVE_INTERVAL_S * (VMM_KEEPALIVE_COUNT + 1) seconds (the bound,
 * 8 s) is closed by libvirt, which calls the lost callback below; a peer
 * that closes the socket (libvirtd killed or restarted) is seen at once. */
#define VMM_KEEPALIVE_INTERVAL_S 2
#define VMM_KEEPALIVE_COUNT	 3
#define VMM_KEEPALIVE_BOUND_MS	 (VMM_KEEPALIVE_INTERVAL_S * (VMM_KEEPALIVE_COUNT + 1) * 1000)

/* The connection's generation: bumps each time a lost connection is
 * replaced by a new one (vmm's own reconnect or vmm_reconnect). A stream
 * channel opened on generation g died with it once the generation moved
 * on: the caller may reopen it with vmm_vm_open_channel. */
unsigned vmm_conn_gen(struct vmm *v);

/* true when the libvirt connection is open and answered within the
 * keepalive bound. */
bool vmm_connected(struct vmm *v);

/* A connection libvirt closed without calling the close callback goes the
 * callback's way now (vmm's own reconnect, or the lost callback below).
 * libvirt marks a connection closed as soon as keepalive gives up inside
 * a call in flight, but runs the close callback only once the last call
 * on it has returned, and with several threads calling that was seen not
 * to come at all (test_remote, metrics on). The host check calls it each
 * round; no lock held, never blocks. */
void vmm_conn_check(struct vmm *v);

/* Called on vmm's event-loop thread with no vmm lock held when the
 * connection closes (keepalive timeout, remote end gone, libvirtd
 * restarted); `why` is borrowed. Setting one turns vmm's own reconnecting
 * off: the connection then stays down (vmm_connected false, calls fail
 * with SBX_E_SERVICE_UNAVAILABLE or SBX_E_SANDBOX_ERROR) until the caller
 * runs vmm_reconnect(). Without one (fn NULL), vmm reconnects by itself
 * with backoff as it always did. Do not block in it. */
typedef void (*vmm_conn_lost_fn)(void *opaque, const char *why);
void vmm_set_conn_lost_cb(struct vmm *v, vmm_conn_lost_fn fn, void *opaque);

/* Reopen a lost connection (blocking, bounded by timeout_ms; call from a
 * background thread, never from a request or with a lock held). 0, or -1
 * with SBX_E_SERVICE_UNAVAILABLE (no answer within timeout_ms, or another
 * reconnect in progress). A connection that is still up (vmm_connected)
 * is kept: 0 at once. Existing struct vmm_vm handles are re-looked-up
 * by name on the new connection (a domain that stopped meanwhile gets the
 * stopped callback); their channels must be reopened by the caller with
 * vmm_vm_open_channel. A connect still under way at the timeout finishes
 * on a thread of its own and is closed. */
int vmm_reconnect(struct vmm *v, int timeout_ms, struct sbx_error *err);

/* A plain-text libvirt URI (qemu+tcp://, any remote transport without TLS
 * or ssh, e.g. +ext, or TLS with no_verify=1): production refuses it. */
bool vmm_uri_is_plaintext(const char *uri);

/* true for a URI that names this machine's hypervisor (qemu:///system,
 * qemu:///session, qemu+unix:///system, test:///default): no host part and
 * no network transport. Anything else is a remote host: its run_dir,
 * kernel, initrd and base image are paths on that host, overlays and
 * console logs are reached through libvirt's storage API, and only the
 * stream transport works. */
bool vmm_uri_is_local(const char *uri);

/* Delete the files in run_dir (overlay, channel socket, console logs) of
 * every name with our prefix whose domain is not running: leftovers of a
 * daemon or host crash. Call when no vmm_vm_start() is in flight (at
 * startup, from reconcile): a start makes its overlay before its domain
 * runs. Returns the count of files removed, or -1 with
 * SBX_E_SERVICE_UNAVAILABLE (libvirt did not answer; nothing deleted). */
int vmm_prune_files(struct vmm *v, struct sbx_error *err);

#endif
