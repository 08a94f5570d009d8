/* sandbox: the checks of a filled config against what the use cases accept
 * (see sandbox.h and docs/configuration.md; the defaults are config/'s). */
#include "sandbox.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "sandbox-priv.h"

static bool host_name_valid(const char *name)
{
	size_t n = strlen(name);

	return n >= 1 && n < SANDBOX_HOST_NAME_MAX &&
	       strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_-") == n;
}

/* The `hosts` list (docs/hosts.md "Config"). */
static int hosts_validate(const struct sandbox_config *cfg, struct sbx_error *err)
{
	bool production = cfg->mode == CONFIG_MODE_PRODUCTION;

	if (cfg->n_hosts < 1 || cfg->n_hosts > SANDBOX_MAX_HOSTS)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "hosts",
				     "hosts must list 1..%d hosts", SANDBOX_MAX_HOSTS);
	if (cfg->host_check_interval_ms < 100 ||
	    cfg->host_down_after_ms < cfg->host_check_interval_ms)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "host_down_after_ms",
				     "host_check_interval_ms must be >= 100 and "
				     "host_down_after_ms >= host_check_interval_ms");
	for (size_t i = 0; i < cfg->n_hosts; i++) {
		const struct sandbox_host_config *h = &cfg->hosts[i];

		if (!host_name_valid(h->name))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "hosts",
					     "a host name is 1..%d of a-z, 0-9, '_' and '-'",
					     SANDBOX_HOST_NAME_MAX - 1);
		if (!h->uri[0] || h->state_dir[0] != '/' || !h->kernel[0] || !h->initrd[0])
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "hosts",
					     "host '%s' needs a uri and an absolute state_dir "
					     "(kernel and initrd paths must fit PATH_MAX)",
					     h->name);
		if (h->max_guests < 1 || (!h->implicit && (h->memory_mib < 1 || h->disk_gib < 1)))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "hosts",
					     "host '%s': max_guests, memory_mib and disk_gib must "
					     "be > 0",
					     h->name);
		if (h->transport != CONFIG_TRANSPORT_STREAM &&
		    h->transport != CONFIG_TRANSPORT_SOCKET)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "hosts",
					     "host '%s': transport must be 'stream' or 'socket'",
					     h->name);
		if (h->transport == CONFIG_TRANSPORT_SOCKET && !vmm_uri_is_local(h->uri))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "hosts",
					     "host '%s': transport 'socket' needs a local URI "
					     "(qemu:///system); a remote host uses 'stream'",
					     h->name);
		if (production && vmm_uri_is_plaintext(h->uri))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "hosts",
					     "host '%s': production mode refuses the plain-text "
					     "URI '%s'; use qemu+tls:// (docs/remote-hosts.md)",
					     h->name, h->uri);
		for (size_t k = 0; k < i; k++) {
			const struct sandbox_host_config *o = &cfg->hosts[k];
			size_t a = strlen(h->domain_prefix), b = strlen(o->domain_prefix);

			if (strcmp(h->name, o->name) == 0)
				return sbx_error_set(err, SBX_E_INVALID_REQUEST, "hosts",
						     "two hosts are named '%s'", h->name);
			if (strcmp(h->state_dir, o->state_dir) == 0)
				return sbx_error_set(err, SBX_E_INVALID_REQUEST, "hosts",
						     "hosts '%s' and '%s' share a state_dir; each "
						     "host needs its own",
						     o->name, h->name);
			/* one libvirt, two hosts: each must tell its domains
			 * from the other's by prefix */
			if (strcmp(h->uri, o->uri) == 0 &&
			    strncmp(h->domain_prefix, o->domain_prefix, a < b ? a : b) == 0)
				return sbx_error_set(
				    err, SBX_E_INVALID_REQUEST, "hosts",
				    "hosts '%s' and '%s' use the same libvirt URI: "
				    "give them domain prefixes that are not "
				    "prefixes of each other",
				    o->name, h->name);
		}
	}
	return 0;
}

/* The paths and the enums, read before anything that depends on them. */
static int validate_basics(const struct sandbox_config *cfg, struct sbx_error *err)
{
	if (!cfg->state_dir[0] || !cfg->db_path[0] || !cfg->kernel[0] || !cfg->initrd[0])
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "state_dir",
				     "state_dir, db_path, kernel and initrd must be set and fit "
				     "in PATH_MAX");
	/* The enums were parsed from their words (api/config.c); these catch
	 * a config filled by other code with a value out of range. */
	if (cfg->mode != CONFIG_MODE_DEVELOPMENT && cfg->mode != CONFIG_MODE_PRODUCTION)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "mode",
				     "mode must be 'development' or 'production'");
	if (cfg->accel != VMM_ACCEL_AUTO && cfg->accel != VMM_ACCEL_KVM &&
	    cfg->accel != VMM_ACCEL_TCG)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "accel",
				     "accel must be 'auto', 'kvm' or 'tcg'");
	if (cfg->log_format != SBX_LOG_TEXT && cfg->log_format != SBX_LOG_JSON)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "log_format",
				     "log_format must be 'text' or 'json'");
	if (cfg->transport != CONFIG_TRANSPORT_STREAM && cfg->transport != CONFIG_TRANSPORT_SOCKET)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "transport",
				     "transport must be 'stream' or 'socket'");
	return 0;
}

/* What production mode refuses, and tcg's opt-in. */
static int validate_production(const struct sandbox_config *cfg, struct sbx_error *err)
{
	if (cfg->mode == CONFIG_MODE_PRODUCTION && vmm_uri_is_plaintext(cfg->libvirt_uri))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "libvirt_uri",
				     "production mode refuses a plain-text libvirt_uri: use "
				     "qemu+tls:// with client certificates (docs/remote-hosts.md)");
	if (cfg->mode == CONFIG_MODE_PRODUCTION && cfg->accel == VMM_ACCEL_TCG && !cfg->allow_tcg)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "allow_tcg",
				     "production mode refuses tcg unless allow_tcg is true");
	if (cfg->accel == VMM_ACCEL_TCG && !cfg->allow_tcg)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "allow_tcg",
				     "accel 'tcg' needs allow_tcg: true (tcg is no security "
				     "boundary)");
	return 0;
}

/* The guest user, the size table and the per-sandbox limits. */
static int validate_sandbox_limits(const struct sandbox_config *cfg, struct sbx_error *err)
{
	if (!cfg->exec_user[0] ||
	    strspn(cfg->exec_user, "abcdefghijklmnopqrstuvwxyz0123456789_-") !=
		strlen(cfg->exec_user) ||
	    cfg->exec_user[0] == '-')
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "exec_user",
				     "exec_user must be a user name of the guest, like 'root' or "
				     "'sandbox'");
	if (cfg->n_sizes == 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "sizes", "at least one size");
	for (size_t i = 0; i < cfg->n_sizes; i++) {
		const struct sandbox_size *s = &cfg->sizes[i];

		if (!s->name[0] || s->vcpus < 1 || s->vcpus > 64 || s->memory_mib < 64 ||
		    s->price_micro_per_hour < 0)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "sizes",
					     "size '%s' needs 1..64 vcpus, >= 64 MiB memory and "
					     "a price >= 0",
					     s->name);
	}
	if (!sandbox_config_size(cfg, cfg->default_size))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "default_size",
				     "default_size '%s' is not in the size table",
				     cfg->default_size);
	if (cfg->max_timeout_minutes < 1 || cfg->max_timeout_minutes > cfg->max_lifetime_minutes)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_timeout_minutes",
				     "max_timeout_minutes must be 1..max_lifetime_minutes");
	if (cfg->default_timeout_minutes < 1 ||
	    cfg->default_timeout_minutes > cfg->max_timeout_minutes)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "default_timeout_minutes",
				     "default_timeout_minutes must be 1..max_timeout_minutes");
	if (cfg->paused_ttl_minutes < 1 || cfg->paused_ttl_minutes > 525600)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "paused_ttl_minutes",
				     "paused_ttl_minutes must be 1..525600");
	if (cfg->pause_timeout_ms < 100 || cfg->pause_timeout_ms > 3600000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "pause_timeout_ms",
				     "pause_timeout_ms must be 100..3600000");
	if (cfg->pause_jobs_per_host < 1 || cfg->pause_jobs_per_host > 64)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "pause_jobs_per_host",
				     "pause_jobs_per_host must be 1..64");
	if (cfg->max_snapshots < 0 || cfg->max_snapshots > 10000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_snapshots",
				     "max_snapshots must be 0..10000");
	if (cfg->max_snapshot_bytes > (uint64_t)1 << 50)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_snapshot_bytes",
				     "max_snapshot_bytes must be 0..2^50");
	if (cfg->snapshot_storage_micro_per_gib_hour > (uint64_t)1000000000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST,
				     "snapshot_storage_micro_per_gib_hour",
				     "snapshot_storage_micro_per_gib_hour must be 0..1000000000");
	if (cfg->snapshot_timeout_ms < 1000 || cfg->snapshot_timeout_ms > 3600000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "snapshot_timeout_ms",
				     "snapshot_timeout_ms must be 1000..3600000");
	if (cfg->paused_storage_micro_per_gib_hour > (uint64_t)1000000000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST,
				     "paused_storage_micro_per_gib_hour",
				     "paused_storage_micro_per_gib_hour must be 0..1000000000");
	if (cfg->max_sandboxes_per_account < 1)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_sandboxes_per_account",
				     "max_sandboxes_per_account must be >= 1");
	/* The guest init runs at most 1024 execs at once (EXEC_MAX). */
	/* QEMU's own cap is 1 GiB on 64-bit hosts (its default); 4 GiB is
	 * already more code than a guest translates. */
	if (cfg->tb_cache_mib > 4096)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "tb_cache_mib",
				     "tb_cache_mib must be 0..4096");
	if (cfg->output_budget_account_mib < 1 || cfg->output_budget_host_mib < 1 ||
	    cfg->output_budget_account_mib > cfg->output_budget_host_mib)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "output_budget_account_mib",
				     "output budgets must be >= 1 MiB, the account's at most the "
				     "host's");
	if (cfg->max_processes_per_sandbox < 1 || cfg->max_processes_per_sandbox > SANDBOX_PROC_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_processes_per_sandbox",
				     "max_processes_per_sandbox must be 1..%d", SANDBOX_PROC_MAX);
	if (cfg->max_api_keys_per_account < 1 || cfg->max_api_keys_per_account > 10000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_api_keys_per_account",
				     "max_api_keys_per_account must be 1..10000");
	if (cfg->max_receipts_per_account < 1)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_receipts_per_account",
				     "max_receipts_per_account must be >= 1");
	if (cfg->max_execs_per_sandbox < 1 || cfg->max_execs_per_sandbox > 1024)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_execs_per_sandbox",
				     "max_execs_per_sandbox must be 1..1024");
	if (cfg->output_cap_bytes < 1 || cfg->output_cap_bytes > 64u * 1024 * 1024)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "output_cap_bytes",
				     "output_cap_bytes must be 1..67108864");
	if (cfg->max_command_bytes < 1 || cfg->max_command_bytes > 512u * 1024)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_command_bytes",
				     "max_command_bytes must be 1..524288 (one protocol frame)");
	if (cfg->max_file_bytes < 1)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_file_bytes",
				     "max_file_bytes must be >= 1");
	if (cfg->file_transfer_timeout_ms < 1000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "file_transfer_timeout_ms",
				     "file_transfer_timeout_ms must be >= 1000");
	if (cfg->max_terminals_per_sandbox < 1 || cfg->max_terminals_per_sandbox > 32)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_terminals_per_sandbox",
				     "max_terminals_per_sandbox must be 1..32");
	if (cfg->max_terminals_per_account < 1 || cfg->max_terminals_per_account > 1024)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_terminals_per_account",
				     "max_terminals_per_account must be 1..1024");
	if (cfg->terminal_idle_timeout_ms < 1000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "terminal_idle_timeout_ms",
				     "terminal_idle_timeout_ms must be >= 1000");
	if (cfg->terminal_reconnect_grace_ms > 600000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "terminal_reconnect_grace_ms",
				     "terminal_reconnect_grace_ms must be 0..600000");
	if (cfg->file_stall_timeout_ms < 100)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "file_stall_timeout_ms",
				     "file_stall_timeout_ms must be >= 100");
	if (cfg->max_body_bytes < 1024)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_body_bytes",
				     "max_body_bytes must be >= 1024");
	if (cfg->disk_overcommit < 1.0 || cfg->disk_overcommit > 100.0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "disk_overcommit",
				     "disk_overcommit must be 1.0..100.0");
	if (cfg->min_free_disk_mib < 64)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "min_free_disk_mib",
				     "min_free_disk_mib must be >= 64 (the ledger's room)");
	if (cfg->max_guests < 1 || cfg->max_concurrent_boots < 1 || cfg->memory_overcommit <= 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_guests",
				     "host capacity settings must be positive");
	if (cfg->boot_timeout_ms < 1000 || cfg->default_exec_timeout_ms < 1)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "boot_timeout_ms",
				     "boot_timeout_ms must be >= 1000");
	return 0;
}

/* The test knobs, the warm pool, executions and hosts, liveness. */
static int validate_pool_and_tests(const struct sandbox_config *cfg, struct sbx_error *err)
{
	if (cfg->test_minute_ms && cfg->mode == CONFIG_MODE_PRODUCTION)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "test_minute_ms",
				     "test_minute_ms is for tests; production mode refuses it");
	if (cfg->test_minute_ms && cfg->test_minute_ms < 100)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "test_minute_ms",
				     "test_minute_ms must be 0 (off) or >= 100");
	for (size_t i = 0; i < cfg->n_pool && i < SANDBOX_MAX_SIZES; i++) {
		if (!sandbox_config_size(cfg, cfg->pool[i].size))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "pool",
					     "pool names size '%s', which is not in 'sizes'",
					     cfg->pool[i].size);
		if (cfg->pool[i].count < 0 || cfg->pool[i].count > cfg->max_guests)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "pool",
					     "pool counts must be 0..max_guests");
	}
	if (cfg->n_pool > SANDBOX_MAX_SIZES)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "pool", "too many pool sizes");
	if (cfg->pool_max_boots < 1 || cfg->pool_max_idle_s < 10)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "pool_max_boots",
				     "pool_max_boots must be >= 1 and pool_max_idle_s >= 10");
	if (!sandbox_fault_name_valid(cfg->test_fault_point))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "test_fault_point",
				     "test_fault_point '%s' is not a fault point (sandbox/fault.c)",
				     cfg->test_fault_point);
	if (sandbox_execution_config_validate(cfg, err) < 0 || hosts_validate(cfg, err) < 0)
		return -1;
	if (cfg->test_hostile_guests && cfg->mode == CONFIG_MODE_PRODUCTION)
		return sbx_error_set(
		    err, SBX_E_INVALID_REQUEST, "test_hostile_guests",
		    "test_hostile_guests is for tests; production mode refuses it");
	if (cfg->test_fault_point[0] && cfg->mode == CONFIG_MODE_PRODUCTION)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "test_fault_point",
				     "test_fault_point is for tests; production mode refuses it");
	if (cfg->test_fault_pause_ms > 600000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "test_fault_pause_ms",
				     "test_fault_pause_ms must be 0..600000");
	if (cfg->liveness_interval_ms && (cfg->liveness_interval_ms < 100 ||
					  cfg->liveness_misses < 1 || cfg->liveness_misses > 100))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "liveness_interval_ms",
				     "liveness_interval_ms must be 0 (off) or >= 100, and "
				     "liveness_misses 1..100");
	if (cfg->metrics_interval_ms &&
	    (cfg->metrics_interval_ms < 1000 || cfg->metrics_interval_ms > 3600000))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "metrics_interval_ms",
				     "metrics_interval_ms must be 0 (off) or 1000..3600000");
	return 0;
}

/* The HTTP server's threads, connections and queue. */
static int validate_http(const struct sandbox_config *cfg, struct sbx_error *err)
{
	if (cfg->http_threads < 1 || cfg->http_threads > 256)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "http_threads",
				     "http_threads must be 1..256");
	if (cfg->http_work_threads < 1 || cfg->http_work_threads > 1024)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "http_work_threads",
				     "http_work_threads must be 1..1024");
	if (cfg->http_max_connections < 16 || cfg->http_max_connections > 65536)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "http_max_connections",
				     "http_max_connections must be 16..65536");
	if (cfg->http_connections_per_ip < 0 || cfg->http_connections_per_ip > 65536)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "http_connections_per_ip",
				     "http_connections_per_ip must be 0 (no limit) ..65536");
	if (cfg->http_receive_timeout_ms < 100 || cfg->http_receive_timeout_ms > 3600000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "http_receive_timeout_ms",
				     "http_receive_timeout_ms must be 100..3600000");
	if (cfg->http_work_queue < 0 || cfg->http_work_queue > 65536)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "http_work_queue",
				     "http_work_queue must be 0..65536");
	return 0;
}

/* Each account's in-flight operations, one cap per kind. */
static int validate_in_flight_caps(const struct sandbox_config *cfg, struct sbx_error *err)
{
	static const struct {
		const char *key;
		size_t off;
	} caps[] = {
	    {"max_creates_in_flight_per_account",
	     offsetof(struct sandbox_config, max_creates_in_flight_per_account)},
	    {"max_deletes_in_flight_per_account",
	     offsetof(struct sandbox_config, max_deletes_in_flight_per_account)},
	    {"max_executions_in_flight_per_account",
	     offsetof(struct sandbox_config, max_executions_in_flight_per_account)},
	    {"max_execs_in_flight_per_account",
	     offsetof(struct sandbox_config, max_execs_in_flight_per_account)},
	    {"max_files_in_flight_per_account",
	     offsetof(struct sandbox_config, max_files_in_flight_per_account)},
	    {"max_processes_in_flight_per_account",
	     offsetof(struct sandbox_config, max_processes_in_flight_per_account)},
	};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(caps); i++) {
		int v = *(const int *)((const char *)cfg + caps[i].off);

		if (v < 1 || v > 65536)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, caps[i].key,
					     "%s must be 1..65536", caps[i].key);
	}
	return 0;
}

/* Ports (docs/api.md "Ports"). */
static int validate_ports(const struct sandbox_config *cfg, struct sbx_error *err)
{
	if (cfg->max_port_conns_per_sandbox < 1 || cfg->max_port_conns_per_sandbox > 64)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_port_conns_per_sandbox",
				     "max_port_conns_per_sandbox must be 1..64");
	if (cfg->max_port_conns_per_account < 1 || cfg->max_port_conns_per_account > 4096)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_port_conns_per_account",
				     "max_port_conns_per_account must be 1..4096");
	if (cfg->port_idle_timeout_ms < 1000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "port_idle_timeout_ms",
				     "port_idle_timeout_ms must be >= 1000");
	if (cfg->port_response_timeout_ms < 100)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "port_response_timeout_ms",
				     "port_response_timeout_ms must be >= 100");
	if (cfg->port_header_max_bytes < 1024 || cfg->port_header_max_bytes > 1024 * 1024)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "port_header_max_bytes",
				     "port_header_max_bytes must be 1024..1048576");
	return 0;
}

/* A DNS name of two labels or more, lowercase (letters, digits, '-'), dot
 * separated, that PORT-TOKEN. before it keeps under 254 bytes. One label
 * ("localhost") would take the API's own host names for previews. */
static bool preview_domain_ok(const char *d)
{
	size_t label = 0, n = strlen(d);

	if (n == 0 || n > 200 || d[0] == '.' || d[n - 1] == '.' || !strchr(d, '.'))
		return false;
	for (; *d; d++) {
		if (*d == '.') {
			if (label == 0)
				return false;
			label = 0;
			continue;
		}
		if (!((*d >= 'a' && *d <= 'z') || (*d >= '0' && *d <= '9') || *d == '-') ||
		    ++label > 63)
			return false;
	}
	return true;
}

/* Previews (docs/api.md "Previews"). */
static int validate_previews(const struct sandbox_config *cfg, struct sbx_error *err)
{
	if (!preview_domain_ok(cfg->preview_domain))
		return sbx_error_set(
		    err, SBX_E_INVALID_REQUEST, "preview_domain",
		    "preview_domain must be a lowercase DNS name of two labels or more "
		    "(letters, digits, '-', dots), such as 'preview.example.com', and not "
		    "the API's own host name");
	if (cfg->preview_max_ttl_seconds < 60 || cfg->preview_max_ttl_seconds > 30 * 86400)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "preview_max_ttl_seconds",
				     "preview_max_ttl_seconds must be 60..2592000");
	if (cfg->max_previews_per_sandbox < 1 || cfg->max_previews_per_sandbox > 1000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "max_previews_per_sandbox",
				     "max_previews_per_sandbox must be 1..1000");
	if (cfg->preview_public_port < 0 || cfg->preview_public_port > 65535)
		return sbx_error_set(
		    err, SBX_E_INVALID_REQUEST, "preview_public_port",
		    "preview_public_port must be 0 (the daemon's port) or 1..65535");
	return 0;
}

/* network.*: the limits are sane; the default policy, the internal
 * ranges and the nameservers were checked when the file was read
 * (api/config.c). */
static int validate_network(const struct sandbox_config *cfg, struct sbx_error *err)
{
	if (cfg->net_max_rules < 1 || cfg->net_max_rules > NET_RULES_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "network.max_rules",
				     "network.max_rules must be 1..%d", NET_RULES_MAX);
	if (cfg->net_connections_per_account < 1)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "network.connections_per_account",
				     "network.connections_per_account must be at least 1");
	if (cfg->net_connections_per_sandbox < 1 || cfg->net_connections_per_sandbox > 32)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "network.connections_per_sandbox",
				     "network.connections_per_sandbox must be 1..32");
	if (cfg->net_connect_timeout_ms < 100 || cfg->net_connect_timeout_ms > 60000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "network.connect_timeout_ms",
				     "network.connect_timeout_ms must be 100..60000");
	if (cfg->net_idle_timeout_ms < 1000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "network.idle_timeout_ms",
				     "network.idle_timeout_ms must be at least 1000");
	if (cfg->net_bandwidth_bytes_per_s < 1 || cfg->net_bandwidth_bytes_per_s > INT64_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "network.bandwidth_bytes_per_s",
				     "network.bandwidth_bytes_per_s must be at least 1");
	if (cfg->net_price_micro_per_gb > INT64_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "network.price_micro_per_gb",
				     "network.price_micro_per_gb is too large");
	return 0;
}

/* The checks run in this order; the first failure is the message. */
int sandbox_config_validate(const struct sandbox_config *cfg, struct sbx_error *err)
{
	if (validate_basics(cfg, err) < 0 || validate_production(cfg, err) < 0 ||
	    validate_sandbox_limits(cfg, err) < 0 || validate_pool_and_tests(cfg, err) < 0 ||
	    validate_http(cfg, err) < 0 || validate_in_flight_caps(cfg, err) < 0 ||
	    validate_network(cfg, err) < 0 || validate_ports(cfg, err) < 0 ||
	    validate_previews(cfg, err) < 0)
		return -1;
	return 0;
}
