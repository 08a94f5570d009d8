/* config: built-in defaults, what derives from other keys, and the sizes
 * by name (see config.h and docs/configuration.md). */
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../vmm/vmm.h"

/* ------------------------------------------------------------- enums */

static const char *const mode_names[] = {
    [CONFIG_MODE_DEVELOPMENT] = "development",
    [CONFIG_MODE_PRODUCTION] = "production",
};
static const char *const accel_names[] = {
    [VMM_ACCEL_AUTO] = "auto",
    [VMM_ACCEL_KVM] = "kvm",
    [VMM_ACCEL_TCG] = "tcg",
};
static const char *const transport_names[] = {
    [CONFIG_TRANSPORT_UNSET] = "",
    [CONFIG_TRANSPORT_STREAM] = "stream",
    [CONFIG_TRANSPORT_SOCKET] = "socket",
};
static const char *const runner_names[] = {
    [CONFIG_RUNNER_AUTO] = "",
    [CONFIG_RUNNER_LIBVIRT] = "libvirt",
    [CONFIG_RUNNER_DEV_PROCESS] = "dev-process",
    [CONFIG_RUNNER_MOCK] = "mock",
};
static const char *const log_format_names[] = {
    [SBX_LOG_TEXT] = "text",
    [SBX_LOG_JSON] = "json",
};

/* The index of s among names[first..n), or -1. */
static int word_index(const char *const *names, size_t first, size_t n, const char *s)
{
	for (size_t i = first; s && i < n; i++)
		if (strcmp(names[i], s) == 0)
			return (int)i;
	return -1;
}

static const char *word_of(const char *const *names, size_t n, unsigned v)
{
	return v < n ? names[v] : "?";
}

#define PARSE(names, first, s, out)                                                                \
	do {                                                                                       \
		int i_ = word_index(names, first, SBX_ARRAY_SIZE(names), s);                       \
		if (i_ < 0)                                                                        \
			return -1;                                                                 \
		*(out) = i_;                                                                       \
		return 0;                                                                          \
	} while (0)

int config_mode_parse(const char *s, enum config_mode *out)
{
	PARSE(mode_names, 0, s, out);
}

int config_accel_parse(const char *s, enum vmm_accel *out)
{
	PARSE(accel_names, 0, s, out);
}

int config_transport_parse(const char *s, enum config_transport *out)
{
	PARSE(transport_names, CONFIG_TRANSPORT_STREAM, s, out);
}

int config_runner_parse(const char *s, enum config_runner *out)
{
	PARSE(runner_names, CONFIG_RUNNER_LIBVIRT, s, out);
}

int config_log_format_parse(const char *s, enum sbx_log_format *out)
{
	PARSE(log_format_names, 0, s, out);
}

const char *config_log_format_name(enum sbx_log_format f)
{
	return word_of(log_format_names, SBX_ARRAY_SIZE(log_format_names), (unsigned)f);
}

const char *config_mode_name(enum config_mode m)
{
	return word_of(mode_names, SBX_ARRAY_SIZE(mode_names), (unsigned)m);
}

const char *config_accel_name(enum vmm_accel a)
{
	return word_of(accel_names, SBX_ARRAY_SIZE(accel_names), (unsigned)a);
}

const char *config_transport_name(enum config_transport t)
{
	return word_of(transport_names, SBX_ARRAY_SIZE(transport_names), (unsigned)t);
}

const char *config_runner_name(enum config_runner r)
{
	return word_of(runner_names, SBX_ARRAY_SIZE(runner_names), (unsigned)r);
}

enum vmm_transport config_transport_vmm(enum config_transport t)
{
	return t == CONFIG_TRANSPORT_STREAM ? VMM_TRANSPORT_STREAM : VMM_TRANSPORT_SOCKET;
}

/* ------------------------------------------------------------- defaults */

static void set_size(struct sandbox_size *s, const char *name, unsigned vcpus, uint64_t mem_gib,
		     uint64_t disk_gib, int64_t price)
{
	snprintf(s->name, sizeof(s->name), "%s", name);
	s->vcpus = vcpus;
	s->memory_mib = mem_gib * 1024;
	s->disk_gib = disk_gib;
	s->price_micro_per_hour = price;
}

void sandbox_config_defaults(struct sandbox_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->mode = CONFIG_MODE_DEVELOPMENT;
	snprintf(cfg->listen, sizeof(cfg->listen), "127.0.0.1:8080");
	snprintf(cfg->state_dir, sizeof(cfg->state_dir), "/var/lib/sandboxd");
	snprintf(cfg->libvirt_uri, sizeof(cfg->libvirt_uri), "qemu:///system");
	snprintf(cfg->domain_prefix, sizeof(cfg->domain_prefix), "sbx-");
	cfg->accel = VMM_ACCEL_AUTO;
	cfg->allow_tcg = false;
	cfg->transport = CONFIG_TRANSPORT_SOCKET;
	cfg->log_format = SBX_LOG_TEXT;
	/* 32 MiB instead of QEMU's 1 GiB cap: ~31 MiB of code cache per guest
	 * instead of 46 idle and 371 after a build session, for ~30-65% more
	 * time in code-heavy work under TCG (docs/benchmarks.md). */
	cfg->tb_cache_mib = 32;
	cfg->free_page_reporting = true;

	/* API.md's size table: $0.09, $0.28, $0.55 per hour. */
	set_size(&cfg->sizes[0], "small", 2, 4, 40, 90000);
	set_size(&cfg->sizes[1], "medium", 4, 8, 80, 280000);
	set_size(&cfg->sizes[2], "large", 8, 16, 160, 550000);
	cfg->n_sizes = 3;
	snprintf(cfg->default_size, sizeof(cfg->default_size), "small");
	cfg->default_timeout_minutes = 15;
	cfg->max_timeout_minutes = 1440;
	cfg->max_lifetime_minutes = 1440;
	cfg->paused_ttl_minutes = 1440;
	cfg->paused_storage_micro_per_gib_hour = 0;
	cfg->pause_timeout_ms = 120000;
	cfg->pause_jobs_per_host = 2;
	cfg->max_snapshots = 10;
	cfg->max_snapshot_bytes = 10ULL << 30;
	cfg->snapshot_storage_micro_per_gib_hour = 0;
	cfg->snapshot_timeout_ms = 60000;

	cfg->max_sandboxes_per_account = 20;
	cfg->max_execs_per_sandbox = 64;
	cfg->max_api_keys_per_account = 100;
	cfg->max_receipts_per_account = 10000;
	cfg->max_processes_per_sandbox = 16;
	cfg->max_terminals_per_sandbox = 4;
	cfg->max_terminals_per_account = 16;
	cfg->terminal_idle_timeout_ms = 900000;
	cfg->terminal_reconnect_grace_ms = 30000;
	cfg->max_port_conns_per_sandbox = 16;
	cfg->max_port_conns_per_account = 64;
	cfg->port_idle_timeout_ms = 60000;
	cfg->port_response_timeout_ms = 30000;
	cfg->port_header_max_bytes = 65536;
	snprintf(cfg->preview_domain, sizeof cfg->preview_domain, "preview.localhost");
	cfg->preview_max_ttl_seconds = 86400;
	cfg->max_previews_per_sandbox = 20;
	cfg->output_budget_account_mib = 512;
	cfg->output_budget_host_mib = 2048;
	cfg->max_body_bytes = 1024 * 1024;
	cfg->max_file_bytes = 1024ULL * 1024 * 1024;
	cfg->file_stall_timeout_ms = 30000;
	cfg->file_transfer_timeout_ms = 3600000;
	cfg->max_command_bytes = 256 * 1024;
	cfg->output_cap_bytes = 1024 * 1024;
	cfg->default_exec_timeout_ms = 60000;
	cfg->boot_timeout_ms = 60000;
	cfg->boot_queue_timeout_ms = 180000;
	/* The VM is the isolation boundary and users own it (apt, sudo):
	 * root by default, like E2B and Fly Machines (docs/configuration.md). */
	snprintf(cfg->exec_user, sizeof(cfg->exec_user), "root");
	cfg->exec_backstop_grace_ms = 10000;

	cfg->host_check_interval_ms = 2000;
	cfg->host_down_after_ms = 30000;
	cfg->max_guests = 24;
	cfg->memory_overcommit = 4.0;
	cfg->max_concurrent_boots = 2;
	cfg->min_free_disk_mib = 2048;
	cfg->disk_overcommit = 1.0;

	cfg->n_pool = 0; /* no warm pool unless the config asks for one */
	cfg->pool_max_idle_s = 600;
	cfg->pool_max_boots = 1;

	cfg->destroy_on_exit = false;
	cfg->http_threads = 4;
	cfg->http_work_threads = 32;
	cfg->http_work_queue = 64;
	/* Well below the connection limit: one account's parked requests
	 * (4 + 8 + 4 + 32 + 8 + 8) cannot take the host's 1024 connections. */
	cfg->max_creates_in_flight_per_account = 4;
	cfg->max_deletes_in_flight_per_account = 8;
	cfg->max_executions_in_flight_per_account = 4;
	cfg->max_execs_in_flight_per_account = 32;
	cfg->max_files_in_flight_per_account = 8;
	cfg->max_processes_in_flight_per_account = 8;
	cfg->http_max_connections = 1024;
	cfg->http_connections_per_ip = 64;
	cfg->http_receive_timeout_ms = 30000;
	cfg->liveness_interval_ms = 5000;
	cfg->liveness_misses = 3;
	cfg->metrics_interval_ms = 5000;
	cfg->execution_price_micro_per_second = 40;
	cfg->execution_max_timeout_seconds = 60;
	cfg->execution_max_code_bytes = 256 * 1024;
	cfg->execution_store_max_bytes = 256 * 1024;
	cfg->execution_store_account_max_bytes = 64ull * 1024 * 1024;
	cfg->execution_retention_hours = 168;
	cfg->net_allow_open = false;
	cfg->net_max_rules = 32;
	cfg->net_bandwidth_bytes_per_s = 12500000;
	cfg->net_connections_per_account = 64;
	cfg->net_connections_per_sandbox = 32;
	cfg->net_connect_timeout_ms = 10000;
	cfg->net_idle_timeout_ms = 300000;
}

/* dst = base + suffix unless dst is set; a path that does not fit is left
 * empty, which sandbox_config_validate() reports. */
static void derive(char *dst, size_t n, const char *base, const char *suffix)
{
	if (dst[0])
		return;
	if (snprintf(dst, n, "%s%s", base, suffix) >= (int)n)
		dst[0] = '\0';
}

/* dst (if empty) = the top-level path `top`, re-rooted from the top-level
 * state dir to the host's when it lies under it. */
static void rebase(char *dst, size_t n, const char *top, const char *top_dir, const char *host_dir)
{
	size_t k = strlen(top_dir);

	if (dst[0])
		return;
	if (top[0] && strncmp(top, top_dir, k) == 0 && top[k] == '/')
		derive(dst, n, host_dir, top + k);
	else
		snprintf(dst, n, "%s", top);
}

void sandbox_config_resolve(struct sandbox_config *cfg)
{
	derive(cfg->db_path, sizeof(cfg->db_path), cfg->state_dir, "/sandboxd.db");
	derive(cfg->kernel, sizeof(cfg->kernel), cfg->state_dir, "/images/tiny/vmlinux");
	derive(cfg->initrd, sizeof(cfg->initrd), cfg->state_dir, "/images/tiny/initramfs.cpio.gz");
	if (cfg->n_hosts == 0) {
		struct sandbox_host_config *h = &cfg->hosts[0];

		memset(h, 0, sizeof(*h));
		snprintf(h->name, sizeof(h->name), "local");
		snprintf(h->uri, sizeof(h->uri), "%s", cfg->libvirt_uri);
		snprintf(h->state_dir, sizeof(h->state_dir), "%s", cfg->state_dir);
		h->max_guests = cfg->max_guests;
		h->implicit = true;
		cfg->n_hosts = 1;
	}
	for (size_t i = 0; i < cfg->n_hosts && i < SANDBOX_MAX_HOSTS; i++) {
		struct sandbox_host_config *h = &cfg->hosts[i];

		if (!h->domain_prefix[0])
			snprintf(h->domain_prefix, sizeof(h->domain_prefix), "%s",
				 cfg->domain_prefix);
		if (h->transport == CONFIG_TRANSPORT_UNSET)
			h->transport =
			    vmm_uri_is_local(h->uri) ? cfg->transport : CONFIG_TRANSPORT_STREAM;
		rebase(h->kernel, sizeof(h->kernel), cfg->kernel, cfg->state_dir, h->state_dir);
		rebase(h->initrd, sizeof(h->initrd), cfg->initrd, cfg->state_dir, h->state_dir);
		rebase(h->base_image, sizeof(h->base_image), cfg->base_image, cfg->state_dir,
		       h->state_dir);
	}
}

const struct sandbox_size *sandbox_config_size(const struct sandbox_config *cfg, const char *name)
{
	for (size_t i = 0; i < cfg->n_sizes; i++)
		if (strcmp(cfg->sizes[i].name, name) == 0)
			return &cfg->sizes[i];
	return NULL;
}

const char *sandbox_config_size_names(const struct sandbox_config *cfg, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < cfg->n_sizes && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s'%s'", i ? ", " : "",
					 cfg->sizes[i].name);
	return buf;
}
