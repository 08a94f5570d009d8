/* config: what the daemon is told (the config file and flags, with the
 * built-in defaults and what derives from them). Below every other module
 * that reads it (fleet/, sandbox/, api/): plain structs, no threads, no I/O.
 * api/config.c parses the file into it; sandbox_config_validate (sandbox/)
 * checks a filled one against what the use cases accept.
 */
#ifndef SBX_CONFIG_H
#define SBX_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/util.h"
#include "../vmm/vmm.h"

#define SANDBOX_ID_MAX	  40
#define SANDBOX_MAX_SIZES 8

/* ---------------------------------------------------------------- config */

/* The keys whose value is one of a few words are enums, parsed once where
 * the file is read (api/config.c); the words exist only at the edges (the
 * file, logs, receipts). config_*_parse returns 0 and sets *out, or -1 for
 * a word it does not know; config_*_name is the word of a value. */
enum config_mode { CONFIG_MODE_DEVELOPMENT, CONFIG_MODE_PRODUCTION };
/* A host's channel transport; UNSET (a host that names none) is filled by
 * sandbox_config_resolve. */
enum config_transport { CONFIG_TRANSPORT_UNSET, CONFIG_TRANSPORT_STREAM, CONFIG_TRANSPORT_SOCKET };
/* The execution runner; AUTO picks one by mode (sandbox_execution_runner). */
enum config_runner {
	CONFIG_RUNNER_AUTO,
	CONFIG_RUNNER_LIBVIRT,
	CONFIG_RUNNER_DEV_PROCESS,
	CONFIG_RUNNER_MOCK
};

int config_mode_parse(const char *s, enum config_mode *out);
int config_accel_parse(const char *s, enum vmm_accel *out);
int config_transport_parse(const char *s, enum config_transport *out); /* never UNSET */
int config_runner_parse(const char *s, enum config_runner *out);       /* never AUTO */
int config_log_format_parse(const char *s, enum sbx_log_format *out);
const char *config_mode_name(enum config_mode m);
const char *config_accel_name(enum vmm_accel a);
const char *config_transport_name(enum config_transport t); /* UNSET: "" */
const char *config_runner_name(enum config_runner r);	    /* AUTO: "" */
const char *config_log_format_name(enum sbx_log_format f);
/* The vmm transport of a resolved one (UNSET reads as socket). */
enum vmm_transport config_transport_vmm(enum config_transport t);

struct sandbox_size {
	char name[16];
	unsigned vcpus;
	uint64_t memory_mib;
	uint64_t disk_gib;
	int64_t price_micro_per_hour;
};

/* One libvirt host guests are placed on (docs/hosts.md). Config key
 * `hosts`: a list of them; without it, one host named "local" made of the
 * top-level keys (libvirt_uri, state_dir, max_guests, ...). Paths are on
 * that host. */
#define SANDBOX_MAX_HOSTS     8
#define SANDBOX_HOST_NAME_MAX 32 /* with its NUL (STORE_HOST_MAX) */
struct sandbox_host_config {
	char name[SANDBOX_HOST_NAME_MAX]; /* [a-z0-9_-], unique */
	char uri[256];			  /* "qemu:///system", "qemu+tls://10.77.0.2/system" */
	char state_dir[PATH_MAX];	  /* run/ and images/ on that host; unique */
	char domain_prefix[32];		  /* "" = the top-level domain_prefix */
	enum config_transport transport;  /* UNSET = stream (remote) / top-level (local) */
	int max_guests;			  /* > 0 */
	/* Guest memory (MiB) and disk (GiB) the host takes, > 0. 0 only for
	 * the "local" host made from the top-level keys: memory is then
	 * host RAM x memory_overcommit and disk the state dir's free space
	 * (the rules of docs/configuration.md "Capacity"). */
	uint64_t memory_mib;
	uint64_t disk_gib;
	/* Kernel, initrd, base image on that host: "" = the top-level ones,
	 * re-rooted from the top-level state_dir to this one when under it
	 * (the same layout), else the same path. Set by
	 * sandbox_config_resolve. */
	char kernel[PATH_MAX];
	char initrd[PATH_MAX];
	char base_image[PATH_MAX];
	bool implicit; /* made from the top-level keys (no `hosts` key) */
};

/* Every knob of the daemon; docs/configuration.md lists each key of the
 * JSON config file with its default. Paths are absolute. */
#define SANDBOX_EXECUTION_RUNTIMES 4 /* entries of execution_pool at most */

struct sandbox_config {
	enum config_mode mode;	 /* development | production */
	char listen[64];	 /* "127.0.0.1:8080" */
	char metrics_listen[64]; /* "" = off; the operator's /metrics address */
	char db_path[PATH_MAX];
	char state_dir[PATH_MAX]; /* kernel, images, overlays, sockets; qemu-readable */
	char libvirt_uri[256];
	char domain_prefix[32]; /* "sbx-" */
	enum vmm_accel accel;	/* auto | kvm | tcg */
	bool allow_tcg;
	char kernel[PATH_MAX];
	char initrd[PATH_MAX];
	char base_image[PATH_MAX]; /* "" = initramfs only (tiny image) */
	char kernel_cmdline[256];
	enum config_transport transport; /* stream | socket */
	enum sbx_log_format log_format;	 /* text | json (util's logger) */
	unsigned tb_cache_mib;
	bool free_page_reporting; /* true */

	struct sandbox_size sizes[SANDBOX_MAX_SIZES];
	size_t n_sizes;
	char default_size[16];
	int default_timeout_minutes; /* 15 */
	int max_timeout_minutes;     /* 1440 */
	int max_lifetime_minutes;    /* 1440: 24 h from created_at */
	/* Pause and resume (docs/lifecycle.md "Pause and resume"): a paused
	 * sandbox is deleted (ended expired) this long after its pause, and
	 * its storage (save file + overlay, host-observed) costs this much
	 * per GiB-hour while paused. */
	int paused_ttl_minutes;			    /* 1440 */
	uint64_t paused_storage_micro_per_gib_hour; /* 0 */
	/* A save or a restore not done in this long is aborted (the save:
	 * the sandbox keeps running; the restore: it ends failed), and at
	 * most this many of them run at once on one host (more: 429). */
	uint32_t pause_timeout_ms; /* 120000 */
	int pause_jobs_per_host;   /* 2 */
	/* Disk snapshots (docs/api.md "Snapshots"): per account at most
	 * max_snapshots of them, taking at most max_snapshot_bytes
	 * (host-observed) together; their storage costs this much per
	 * GiB-hour; a copy not done in snapshot_timeout_ms is killed (a
	 * running sandbox is suspended at most that long). */
	int max_snapshots;			      /* 10 */
	uint64_t max_snapshot_bytes;		      /* 10 GiB */
	uint64_t snapshot_storage_micro_per_gib_hour; /* 0 */
	uint32_t snapshot_timeout_ms;		      /* 60000 */

	int max_sandboxes_per_account; /* 20 */
	/* Valid API keys per account (429 beyond); revoked ones are kept
	 * execution_retention_hours, at most this many more. */
	int max_api_keys_per_account; /* 100 */
	/* Signed receipts kept per account (the oldest go first), each for
	 * execution_retention_hours. */
	int max_receipts_per_account;	      /* 10000 */
	int max_execs_per_sandbox;	      /* 64 */
	int max_processes_per_sandbox;	      /* 16: running background processes */
	int max_terminals_per_sandbox;	      /* 4: open terminals (WebSocket) */
	int max_terminals_per_account;	      /* 16 */
	uint32_t terminal_idle_timeout_ms;    /* 900000: no byte either way ends one */
	uint32_t terminal_reconnect_grace_ms; /* 30000: a dropped client may reattach (0: never) */
	/* Ports (docs/api.md "Ports"): proxied connections to a sandbox's
	 * ports open at once, per sandbox and per account; no byte either way
	 * for port_idle_timeout_ms ends one; the guest's server answers
	 * within port_response_timeout_ms (504 past it); its status line and
	 * headers fit in port_header_max_bytes (502 past it). */
	int max_port_conns_per_sandbox;	   /* 16 */
	int max_port_conns_per_account;	   /* 64 */
	uint32_t port_idle_timeout_ms;	   /* 60000 */
	uint32_t port_response_timeout_ms; /* 30000 */
	uint32_t port_header_max_bytes;	   /* 65536 */
	/* Preview URLs (docs/api.md "Previews"): PORT-TOKEN.<preview_domain>
	 * is a browser's way to a port; a preview lives at most
	 * preview_max_ttl_seconds, a sandbox has at most
	 * max_previews_per_sandbox live ones. */
	char preview_domain[128];     /* "preview.localhost" */
	int preview_max_ttl_seconds;  /* 86400 */
	int max_previews_per_sandbox; /* 20 */
	/* The port a browser reaches previews on (a URL's): 0 the daemon's
	 * own; 443 (https) or 80 (http) behind a front end, shown without. */
	int preview_public_port;	    /* 0 */
	uint64_t output_budget_account_mib; /* 512: buffered exec output per account */
	uint64_t output_budget_host_mib;    /* 2048: the same for the whole host */
	size_t max_body_bytes;		    /* HTTP request body cap, 1 MiB */
	uint64_t max_file_bytes;	    /* one upload or download, 1 GiB */
	uint32_t file_stall_timeout_ms;	    /* a transfer the guest stalls fails, 30000 */
	/* A files request ends within file_transfer_timeout_ms of its headers
	 * (3600000), and a transfer must move SANDBOX_FILE_MIN_PROGRESS bytes
	 * in every file_stall_timeout_ms (docs/api.md "Fair share"). */
	uint32_t file_transfer_timeout_ms;
	size_t max_command_bytes;	  /* 256 KiB */
	size_t output_cap_bytes;	  /* per stream, 1 MiB */
	uint32_t default_exec_timeout_ms; /* 60000 */
	char exec_user[32];		  /* guest user commands run as: "root" */
	uint32_t boot_timeout_ms;	  /* boot start -> HELLO deadline, 60000 */
	uint32_t boot_queue_timeout_ms;	  /* wait for a boot slot, 180000 */
	uint32_t exec_backstop_grace_ms;  /* 10000 */

	/* Hosts (docs/hosts.md): filled by sandbox_config_resolve from the
	 * top-level keys when the config has no `hosts`. */
	struct sandbox_host_config hosts[SANDBOX_MAX_HOSTS];
	size_t n_hosts;
	uint32_t host_check_interval_ms; /* health check and drain read, 2000 */
	uint32_t host_down_after_ms;	 /* unanswered this long: down, 30000 */

	int max_guests;		  /* host capacity */
	double memory_overcommit; /* guest memory <= ratio * host RAM */
	int max_concurrent_boots;
	/* Free disk (MiB) the filesystems of the state dir and the database
	 * always keep for the ledger: creates and executions are refused (503)
	 * when they would leave less, counting every running or booting
	 * guest's overlay at its full disk_gib (it may grow that far) divided
	 * by disk_overcommit (1.0: a guest filling its disk can never take
	 * the ledger's space). */
	uint64_t min_free_disk_mib;
	double disk_overcommit; /* 1.0 */

	/* Warm pool (docs/pool.md): pre-booted guests per size, handed out
	 * once. pool[i].count guests of size pool[i].size are kept ready. */
	struct {
		char size[16];
		int count;
	} pool[SANDBOX_MAX_SIZES];
	size_t n_pool;
	uint32_t pool_max_idle_s; /* recycle a pooled guest idle this long (600) */
	int pool_max_boots;	  /* pool boots in flight at once (1) */

	bool destroy_on_exit; /* destroy guests when the daemon stops */
	/* Tests only: the length of one "minute" of timeout_minutes in ms (0 =
	 * 60000), so expiry can be tested in seconds. Refused in production
	 * mode. Billing still prices real elapsed time. */
	uint32_t test_minute_ms;
	int http_threads; /* libmicrohttpd thread pool size */
	/* Long requests (create, DELETE, executions) run on a bounded pool of
	 * http_work_threads threads while their connection is parked; at most
	 * http_work_queue more wait for one (503 beyond). Per account, at most
	 * max_*_in_flight_per_account requests of each kind are in flight at
	 * once (429 rate_limited beyond): docs/api.md "Fair share". */
	int http_work_threads;			  /* 32 */
	int http_work_queue;			  /* 64 */
	int max_creates_in_flight_per_account;	  /* 4 */
	int max_deletes_in_flight_per_account;	  /* 8 */
	int max_executions_in_flight_per_account; /* 4 */
	int max_execs_in_flight_per_account;	  /* 32 */
	int max_files_in_flight_per_account;	  /* 8: transfers, until the reply is sent */
	int max_processes_in_flight_per_account;  /* 8: processes calls */
	/* Connections (docs/api.md "Connections"): at most http_max_connections
	 * in all and http_connections_per_ip from one client address (0 = no
	 * per-address limit); a connection that has not delivered a whole
	 * request (headers and body) http_receive_timeout_ms after it was
	 * accepted or sent its previous reply is closed. */
	int http_max_connections;	  /* 1024 */
	int http_connections_per_ip;	  /* 64 */
	uint32_t http_receive_timeout_ms; /* 30000 */

	/* One-shot executions (docs/executions.md). */
	enum config_runner execution_runner;	   /* auto | libvirt | dev-process | mock */
	uint64_t execution_price_micro_per_second; /* 40 */
	int execution_max_timeout_seconds;	   /* 60 */
	char execution_size[16];		   /* guest size, "" = default_size */
	size_t execution_max_code_bytes;	   /* 256 KiB */
	/* What the database keeps of execution responses (GET
	 * /v1/sandbox/executions/{id}): one stored copy at most this many
	 * bytes (larger ones keep the head of stdout/stderr), at most
	 * execution_store_account_max_bytes of them per account (the oldest
	 * are dropped), each for execution_retention_hours. */
	size_t execution_store_max_bytes;	    /* 256 KiB */
	uint64_t execution_store_account_max_bytes; /* 64 MiB */
	int execution_retention_hours;		    /* 168 (7 days) */
	bool execution_test_shell_runtime;	    /* tests only: runtime "sh" */
	/* Execution pool (docs/pool.md "Execution guests"): guests of
	 * execution_size per runtime whose interpreter is already started and
	 * waits for the code. execution_pool[i].count for runtime
	 * execution_pool[i].runtime ("python" | "node"); none by default. */
	struct {
		char runtime[8];
		int count;
	} execution_pool[SANDBOX_EXECUTION_RUNTIMES];
	size_t n_execution_pool;

	/* Liveness (docs/lifecycle.md): every live guest is pinged over its
	 * channel every liveness_interval_ms (0 = off), each ping waiting at
	 * most that long; after liveness_misses misses in a row the sandbox
	 * ends as failed at its last answered moment (last_seen_at). */
	uint32_t liveness_interval_ms; /* 5000 */
	int liveness_misses;	       /* 3 */
	/* Per-sandbox metrics (docs/api.md "Metrics"): every running guest's
	 * CPU, memory and disk are sampled every metrics_interval_ms (0 =
	 * off), the last 720 samples kept per guest (fleet/metrics.c). */
	uint32_t metrics_interval_ms; /* 5000 */
	/* Egress (docs/network.md): config key "network", an object. The
	 * operator's limits on what a policy may say (net_allow_open: egress
	 * "open" accepted; net_max_rules: rules per list), the ranges of the
	 * private set a policy may then allow (an internal mirror), the
	 * policy of a create that names none (JSON; "" = {"egress":"none"}),
	 * with the hostnames of this host's apt sources added to its allow
	 * list when net_default_apt_sources, the price of a GB relayed, the
	 * caps published in /v1/limits, and the DNS servers that resolve the
	 * names connections ask for (none: this host's resolv.conf). */
	bool net_allow_open;		    /* false */
	int net_max_rules;		    /* 32, at most 64 */
	char net_internal_ranges[16][64];   /* CIDRs */
	size_t n_net_internal_ranges;	    /* <= 16 */
	char net_default_policy[4096];	    /* "" = none */
	bool net_default_apt_sources;	    /* false */
	uint64_t net_price_micro_per_gb;    /* 0 */
	uint64_t net_bandwidth_bytes_per_s; /* 12500000 (100 Mbit/s) per sandbox */
	int net_connections_per_account;    /* 64 open at once */
	int net_connections_per_sandbox;    /* 32 open at once, at most 32 */
	uint32_t net_connect_timeout_ms;    /* 10000: resolve and connect */
	uint32_t net_idle_timeout_ms;	    /* 300000: no byte either way */
	char net_nameservers[3][64];	    /* "198.18.0.53", "[2001:db8::53]:5353" */
	size_t n_net_nameservers;	    /* <= 3; 0: the system resolver */
	/* Tests only: die with _exit(137) at this named step (sandbox/fault.h
	 * lists them; "" = never). Refused in production mode. */
	char test_fault_point[48];
	/* Tests only: guests boot with the hostile-guest test kit switched on
	 * (sandboxd.test_hostile=1; docs/protocol.md). Refused in production. */
	bool test_hostile_guests;
	/* Tests only: when > 0, the first request to reach test_fault_point
	 * sleeps this many ms there instead of dying (0 = die). */
	uint32_t test_fault_pause_ms;
};

/* The state dir and its run/ subdirectory (overlays, channel sockets,
 * console logs): the owner's only, plus o+x so qemu (libvirt-qemu) can
 * reach the files libvirt relabels for it (docs/configuration.md). */
#define SANDBOX_STATE_DIR_MODE 0711

/* Built-in defaults (API.md tables). */
void sandbox_config_defaults(struct sandbox_config *cfg);
/* Fill what derives from others when left empty: db_path =
 * state_dir/sandboxd.db, kernel/initrd = state_dir/images/tiny/{vmlinux,
 * initramfs.cpio.gz}; without `hosts`, the one host "local" from the
 * top-level keys; each host's empty domain_prefix, transport, kernel,
 * initrd and base_image (sandbox_host_config). Call after the file and
 * the flags were applied. */
void sandbox_config_resolve(struct sandbox_config *cfg);
/* The size entry by name, or NULL (borrowed). */
const struct sandbox_size *sandbox_config_size(const struct sandbox_config *cfg, const char *name);
/* The sizes' names for a message, "'small', 'medium'", into buf (cut at
 * len); returns buf. */
const char *sandbox_config_size_names(const struct sandbox_config *cfg, char *buf, size_t len);

#endif
