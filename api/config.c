/* api/config.c: the JSON config file (docs/configuration.md) applied over a
 * struct sandbox_config. One table names every key, its type and where it
 * goes; unknown keys, wrong types and strings too long for their field are
 * errors naming the key. */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "api-priv.h"

/* A config file is small; anything bigger is a mistake. */
#define CONFIG_MAX_BYTES (1024 * 1024)
#define CONFIG_MAX_DEPTH 8

enum key_type { K_STR, K_BOOL, K_INT, K_UINT, K_U32, K_U64, K_SIZE, K_DOUBLE, K_ENUM };

struct key_spec {
	const char *name;
	enum key_type type;
	size_t offset;
	size_t size; /* K_STR: buffer size */
	/* K_ENUM: the word to its enum (config.h), and the words for the
	 * error ("'a' or 'b'"). */
	int (*parse)(const char *word, void *out);
	const char *words;
};

/* The enum keys: each word parsed once, here (config/config.h). */
static int parse_mode(const char *w, void *out)
{
	return config_mode_parse(w, out);
}

static int parse_accel(const char *w, void *out)
{
	return config_accel_parse(w, out);
}

static int parse_transport(const char *w, void *out)
{
	return config_transport_parse(w, out);
}

static int parse_log_format(const char *w, void *out)
{
	return config_log_format_parse(w, out);
}

/* "" is the automatic choice (sandbox_execution_runner). */
static int parse_runner(const char *w, void *out)
{
	if (!w[0]) {
		*(enum config_runner *)out = CONFIG_RUNNER_AUTO;
		return 0;
	}
	return config_runner_parse(w, out);
}

#define STR(f)                                                                                     \
	{                                                                                          \
		.name = #f, .type = K_STR, .offset = offsetof(struct sandbox_config, f),           \
		.size = sizeof(((struct sandbox_config *)0)->f)                                    \
	}
#define NUM(f, t)                                                                                  \
	{                                                                                          \
		.name = #f, .type = t, .offset = offsetof(struct sandbox_config, f)                \
	}
#define ENUM(f, fn, w)                                                                             \
	{                                                                                          \
		.name = #f, .type = K_ENUM, .offset = offsetof(struct sandbox_config, f),          \
		.parse = fn, .words = w                                                            \
	}

static const struct key_spec keys[] = {
    ENUM(mode, parse_mode, "'development' or 'production'"),
    STR(listen),
    STR(db_path),
    STR(state_dir),
    STR(libvirt_uri),
    STR(domain_prefix),
    ENUM(accel, parse_accel, "'auto', 'kvm' or 'tcg'"),
    NUM(allow_tcg, K_BOOL),
    STR(kernel),
    STR(initrd),
    STR(base_image),
    STR(kernel_cmdline),
    ENUM(transport, parse_transport, "'stream' or 'socket'"),
    ENUM(log_format, parse_log_format, "'text' or 'json'"),
    STR(exec_user),
    NUM(tb_cache_mib, K_UINT),
    NUM(free_page_reporting, K_BOOL),
    STR(default_size),
    NUM(default_timeout_minutes, K_INT),
    NUM(max_timeout_minutes, K_INT),
    NUM(max_lifetime_minutes, K_INT),
    NUM(paused_ttl_minutes, K_INT),
    NUM(paused_storage_micro_per_gib_hour, K_U64),
    NUM(pause_timeout_ms, K_U32),
    NUM(pause_jobs_per_host, K_INT),
    NUM(max_snapshots, K_INT),
    NUM(max_snapshot_bytes, K_U64),
    NUM(snapshot_storage_micro_per_gib_hour, K_U64),
    NUM(snapshot_timeout_ms, K_U32),
    NUM(max_sandboxes_per_account, K_INT),
    NUM(max_execs_per_sandbox, K_INT),
    NUM(max_api_keys_per_account, K_INT),
    NUM(max_receipts_per_account, K_INT),
    NUM(max_processes_per_sandbox, K_INT),
    NUM(max_terminals_per_sandbox, K_INT),
    NUM(max_terminals_per_account, K_INT),
    NUM(terminal_idle_timeout_ms, K_U32),
    NUM(terminal_reconnect_grace_ms, K_U32),
    NUM(max_port_conns_per_sandbox, K_INT),
    NUM(max_port_conns_per_account, K_INT),
    NUM(port_idle_timeout_ms, K_U32),
    NUM(port_response_timeout_ms, K_U32),
    NUM(port_header_max_bytes, K_U32),
    STR(preview_domain),
    NUM(preview_max_ttl_seconds, K_INT),
    NUM(max_previews_per_sandbox, K_INT),
    NUM(preview_public_port, K_INT),
    NUM(output_budget_account_mib, K_U64),
    NUM(output_budget_host_mib, K_U64),
    NUM(max_body_bytes, K_SIZE),
    NUM(max_file_bytes, K_U64),
    NUM(file_stall_timeout_ms, K_U32),
    NUM(file_transfer_timeout_ms, K_U32),
    NUM(max_command_bytes, K_SIZE),
    NUM(output_cap_bytes, K_SIZE),
    NUM(default_exec_timeout_ms, K_U32),
    NUM(boot_timeout_ms, K_U32),
    NUM(boot_queue_timeout_ms, K_U32),
    NUM(exec_backstop_grace_ms, K_U32),
    NUM(max_guests, K_INT),
    NUM(host_check_interval_ms, K_U32),
    NUM(host_down_after_ms, K_U32),
    NUM(memory_overcommit, K_DOUBLE),
    NUM(max_concurrent_boots, K_INT),
    NUM(min_free_disk_mib, K_U64),
    NUM(disk_overcommit, K_DOUBLE),
    NUM(pool_max_idle_s, K_U32),
    NUM(pool_max_boots, K_INT),
    NUM(destroy_on_exit, K_BOOL),
    NUM(test_minute_ms, K_U32),
    STR(test_fault_point),
    NUM(test_hostile_guests, K_BOOL),
    STR(metrics_listen),
    NUM(test_fault_pause_ms, K_U32),
    NUM(liveness_interval_ms, K_U32),
    NUM(liveness_misses, K_INT),
    NUM(metrics_interval_ms, K_U32),
    NUM(http_threads, K_INT),
    NUM(http_work_threads, K_INT),
    NUM(http_work_queue, K_INT),
    NUM(max_creates_in_flight_per_account, K_INT),
    NUM(max_deletes_in_flight_per_account, K_INT),
    NUM(max_executions_in_flight_per_account, K_INT),
    NUM(max_execs_in_flight_per_account, K_INT),
    NUM(max_files_in_flight_per_account, K_INT),
    NUM(max_processes_in_flight_per_account, K_INT),
    NUM(http_max_connections, K_INT),
    NUM(http_connections_per_ip, K_INT),
    NUM(http_receive_timeout_ms, K_U32),
    ENUM(execution_runner, parse_runner, "'libvirt', 'dev-process' or 'mock'"),
    NUM(execution_price_micro_per_second, K_U64),
    NUM(execution_max_timeout_seconds, K_INT),
    STR(execution_size),
    NUM(execution_max_code_bytes, K_SIZE),
    NUM(execution_store_max_bytes, K_SIZE),
    NUM(execution_store_account_max_bytes, K_U64),
    NUM(execution_retention_hours, K_INT),
    NUM(execution_test_shell_runtime, K_BOOL),
};

static int bad_type(const char *key, const char *what, struct sbx_error *err)
{
	return sbx_error_set(err, SBX_E_INVALID_REQUEST, key, "config key '%s' must be %s", key,
			     what);
}

/* A non-negative integer <= max (json-c saturates huge numbers, and the
 * uint64 check catches values above INT64_MAX). */
static int get_count(struct json_object *v, const char *key, int64_t min, int64_t max, int64_t *out,
		     struct sbx_error *err)
{
	int64_t x;

	if (!json_object_is_type(v, json_type_int))
		return bad_type(key, "an integer", err);
	x = json_object_get_int64(v);
	if (x < min || x > max || (x == INT64_MAX && json_object_get_uint64(v) > INT64_MAX))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, key,
				     "config key '%s' must be between %lld and %lld", key,
				     (long long)min, (long long)max);
	*out = x;
	return 0;
}

/* Apply one key to the struct at base (a struct sandbox_config, or a
 * struct sandbox_host_config for the host keys). */
static int apply_key(const struct key_spec *k, struct json_object *v, void *base,
		     struct sbx_error *err)
{
	char *field = (char *)base + k->offset;
	int64_t x;

	switch (k->type) {
	case K_STR: {
		size_t n;
		if (!json_object_is_type(v, json_type_string))
			return bad_type(k->name, "a string", err);
		n = (size_t)json_object_get_string_len(v);
		if (memchr(json_object_get_string(v), '\0', n))
			return bad_type(k->name, "a string without NUL", err);
		if (n >= k->size)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, k->name,
					     "config key '%s' is longer than %zu bytes", k->name,
					     k->size - 1);
		memcpy(field, json_object_get_string(v), n + 1);
		return 0;
	}
	case K_BOOL:
		if (!json_object_is_type(v, json_type_boolean))
			return bad_type(k->name, "true or false", err);
		*(bool *)field = json_object_get_boolean(v);
		return 0;
	case K_INT:
		if (get_count(v, k->name, INT_MIN, INT_MAX, &x, err) < 0)
			return -1;
		*(int *)field = (int)x;
		return 0;
	case K_UINT:
		if (get_count(v, k->name, 0, UINT_MAX, &x, err) < 0)
			return -1;
		*(unsigned *)field = (unsigned)x;
		return 0;
	case K_U32:
		if (get_count(v, k->name, 0, UINT32_MAX, &x, err) < 0)
			return -1;
		*(uint32_t *)field = (uint32_t)x;
		return 0;
	case K_U64:
		if (get_count(v, k->name, 0, INT64_MAX, &x, err) < 0)
			return -1;
		*(uint64_t *)field = (uint64_t)x;
		return 0;
	case K_SIZE:
		if (get_count(v, k->name, 0, SIZE_MAX > INT64_MAX ? INT64_MAX : (int64_t)SIZE_MAX,
			      &x, err) < 0)
			return -1;
		*(size_t *)field = (size_t)x;
		return 0;
	case K_DOUBLE:
		if (!json_object_is_type(v, json_type_double) &&
		    !json_object_is_type(v, json_type_int))
			return bad_type(k->name, "a number", err);
		*(double *)field = json_object_get_double(v);
		return 0;
	case K_ENUM:
		if (!json_object_is_type(v, json_type_string))
			return bad_type(k->name, "a string", err);
		if (memchr(json_object_get_string(v), '\0',
			   (size_t)json_object_get_string_len(v)) ||
		    k->parse(json_object_get_string(v), field) < 0)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, k->name, "%s must be %s",
					     k->name, k->words);
		return 0;
	}
	return bad_type(k->name, "valid", err);
}

static int apply_size(const char *name, struct json_object *v, struct sandbox_size *s,
		      struct sbx_error *err)
{
	static const char *const fields[] = {"vcpus", "memory_mib", "disk_gib",
					     "price_micro_usd_per_hour"};
	bool seen[SBX_ARRAY_SIZE(fields)] = {false};
	char key[96];
	int64_t x;

	snprintf(key, sizeof(key), "sizes.%s", name);
	if (!json_object_is_type(v, json_type_object))
		return bad_type(key, "an object", err);
	memset(s, 0, sizeof(*s));
	memcpy(s->name, name, strlen(name) + 1);
	json_object_object_foreach(v, fk, fv)
	{
		size_t i;
		for (i = 0; i < SBX_ARRAY_SIZE(fields); i++)
			if (strcmp(fk, fields[i]) == 0)
				break;
		snprintf(key, sizeof(key), "sizes.%s.%.40s", name, fk);
		if (i == SBX_ARRAY_SIZE(fields))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, key,
					     "unknown config key '%s'", key);
		seen[i] = true;
		switch (i) {
		case 0:
			if (get_count(fv, key, 1, UINT_MAX, &x, err) < 0)
				return -1;
			s->vcpus = (unsigned)x;
			break;
		case 1:
			if (get_count(fv, key, 1, INT64_MAX, &x, err) < 0)
				return -1;
			s->memory_mib = (uint64_t)x;
			break;
		case 2:
			if (get_count(fv, key, 1, INT64_MAX, &x, err) < 0)
				return -1;
			s->disk_gib = (uint64_t)x;
			break;
		default:
			if (get_count(fv, key, 0, INT64_MAX, &x, err) < 0)
				return -1;
			s->price_micro_per_hour = x;
			break;
		}
	}
	for (size_t i = 0; i < SBX_ARRAY_SIZE(fields); i++) {
		if (!seen[i]) {
			snprintf(key, sizeof(key), "sizes.%s.%s", name, fields[i]);
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, key,
					     "config key '%s' is required", key);
		}
	}
	return 0;
}

static int apply_sizes(struct json_object *v, struct sandbox_config *cfg, struct sbx_error *err)
{
	struct sandbox_size sizes[SANDBOX_MAX_SIZES];
	size_t n = 0;

	if (!json_object_is_type(v, json_type_object))
		return bad_type("sizes", "an object of sizes", err);
	json_object_object_foreach(v, name, sv)
	{
		size_t len = strlen(name);
		if (n == SANDBOX_MAX_SIZES)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "sizes",
					     "config key 'sizes' holds at most %d sizes",
					     SANDBOX_MAX_SIZES);
		if (len == 0 || len >= sizeof(sizes[0].name) || !api_env_key_valid(name, len))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "sizes",
					     "size names must be 1..%zu letters, digits or '_'",
					     sizeof(sizes[0].name) - 1);
		if (apply_size(name, sv, &sizes[n], err) < 0)
			return -1;
		n++;
	}
	if (n == 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "sizes",
				     "config key 'sizes' needs at least one size");
	memcpy(cfg->sizes, sizes, n * sizeof(sizes[0]));
	cfg->n_sizes = n;
	return 0;
}

#define HSTR(f)                                                                                    \
	{                                                                                          \
		.name = "hosts[]." #f, .type = K_STR,                                              \
		.offset = offsetof(struct sandbox_host_config, f),                                 \
		.size = sizeof(((struct sandbox_host_config *)0)->f)                               \
	}
#define HNUM(f, t)                                                                                 \
	{                                                                                          \
		.name = "hosts[]." #f, .type = t,                                                  \
		.offset = offsetof(struct sandbox_host_config, f)                                  \
	}

/* The keys of one entry of "hosts" (docs/hosts.md). */
static const struct key_spec host_keys[] = {
    HSTR(name),
    HSTR(uri),
    HSTR(state_dir),
    HSTR(domain_prefix),
    HNUM(max_guests, K_INT),
    HNUM(memory_mib, K_U64),
    HNUM(disk_gib, K_U64),
    HSTR(kernel),
    HSTR(initrd),
    HSTR(base_image),
};

/* "hosts": [{"name": "h2", "uri": ..., "state_dir": ..., "max_guests": 8,
 * "memory_mib": 16384, "disk_gib": 200}, ...] (checked by
 * sandbox_config_validate). */
static int apply_hosts(struct json_object *v, struct sandbox_config *cfg, struct sbx_error *err)
{
	size_t n;

	if (!json_object_is_type(v, json_type_array))
		return bad_type("hosts", "a list of hosts", err);
	n = json_object_array_length(v);
	if (n < 1 || n > SANDBOX_MAX_HOSTS)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "hosts",
				     "config key 'hosts' lists 1..%d hosts", SANDBOX_MAX_HOSTS);
	for (size_t i = 0; i < n; i++) {
		struct json_object *hv = json_object_array_get_idx(v, i);
		struct sandbox_host_config *h = &cfg->hosts[i];

		if (!json_object_is_type(hv, json_type_object))
			return bad_type("hosts", "a list of objects", err);
		struct json_object *transport = NULL;

		memset(h, 0, sizeof(*h));
		json_object_object_foreach(hv, key, kv)
		{
			size_t k;

			if (strcmp(key, "transport") == 0) {
				transport = kv; /* parsed below: its error names the host */
				continue;
			}

			for (k = 0; k < SBX_ARRAY_SIZE(host_keys); k++)
				if (strcmp(key, host_keys[k].name + 8) == 0)
					break;
			if (k == SBX_ARRAY_SIZE(host_keys))
				return sbx_error_set(err, SBX_E_INVALID_REQUEST, "hosts",
						     "unknown key '%.60s' in a host of 'hosts'",
						     key);
			if (apply_key(&host_keys[k], kv, h, err) < 0)
				return -1;
		}
		if (transport && !json_object_is_type(transport, json_type_string))
			return bad_type("hosts[].transport", "a string", err);
		/* "" leaves it to sandbox_config_resolve */
		if (transport && json_object_get_string(transport)[0] &&
		    config_transport_parse(json_object_get_string(transport), &h->transport) < 0)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "hosts",
					     "host '%s': transport must be 'stream' or 'socket'",
					     h->name);
	}
	cfg->n_hosts = n;
	return 0;
}

/* "network": {"allow_open": false, "max_rules": 32, "internal_ranges":
 * ["10.20.0.0/16"], "default_policy": {...}, "default_policy_apt_sources":
 * true, "price_micro_per_gb": 0, "bandwidth_bytes_per_s": ...,
 * "connections_per_account": 64, "nameservers": ["198.18.0.53"]}
 * (docs/network.md). The ranges, the nameservers and the default policy
 * are checked here (network/), with errors naming network.KEY. */
#define NET_KEY(n, f, t)                                                                           \
	{                                                                                          \
		.name = "network." n, .type = t, .offset = offsetof(struct sandbox_config, f)      \
	}
static const struct key_spec net_keys[] = {
    NET_KEY("allow_open", net_allow_open, K_BOOL),
    NET_KEY("max_rules", net_max_rules, K_INT),
    NET_KEY("default_policy_apt_sources", net_default_apt_sources, K_BOOL),
    NET_KEY("price_micro_per_gb", net_price_micro_per_gb, K_U64),
    NET_KEY("bandwidth_bytes_per_s", net_bandwidth_bytes_per_s, K_U64),
    NET_KEY("connections_per_account", net_connections_per_account, K_INT),
    NET_KEY("connections_per_sandbox", net_connections_per_sandbox, K_INT),
    NET_KEY("connect_timeout_ms", net_connect_timeout_ms, K_U32),
    NET_KEY("idle_timeout_ms", net_idle_timeout_ms, K_U32),
};
#undef NET_KEY

static int apply_net_ranges(struct json_object *v, struct sandbox_config *cfg,
			    struct sbx_error *err)
{
	size_t n;

	if (!json_object_is_type(v, json_type_array))
		return bad_type("network.internal_ranges", "a list of CIDRs", err);
	n = json_object_array_length(v);
	if (n > SBX_ARRAY_SIZE(cfg->net_internal_ranges))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "network.internal_ranges",
				     "config key 'network.internal_ranges' lists at most %zu "
				     "ranges",
				     SBX_ARRAY_SIZE(cfg->net_internal_ranges));
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_array_get_idx(v, i);
		struct net_range r;

		if (!json_object_is_type(e, json_type_string) ||
		    net_cidr_parse(json_object_get_string(e), &r) < 0 ||
		    strlen(json_object_get_string(e)) >= sizeof(cfg->net_internal_ranges[0]))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "network.internal_ranges",
					     "config key 'network.internal_ranges[%zu]' must be a "
					     "CIDR such as \"10.20.0.0/16\"",
					     i);
		snprintf(cfg->net_internal_ranges[i], sizeof(cfg->net_internal_ranges[i]), "%s",
			 json_object_get_string(e));
	}
	cfg->n_net_internal_ranges = n;
	return 0;
}

/* "nameservers": at most NET_NAMESERVERS_MAX addresses, each as
 * net_nameserver_parse takes it; [] is the system resolver. */
static int apply_net_nameservers(struct json_object *v, struct sandbox_config *cfg,
				 struct sbx_error *err)
{
	size_t n;

	_Static_assert(SBX_ARRAY_SIZE(cfg->net_nameservers) == NET_NAMESERVERS_MAX,
		       "the config holds what network/ takes");
	if (!json_object_is_type(v, json_type_array))
		return bad_type("network.nameservers", "a list of addresses", err);
	n = json_object_array_length(v);
	if (n > NET_NAMESERVERS_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "network.nameservers",
				     "config key 'network.nameservers' lists at most %d servers",
				     NET_NAMESERVERS_MAX);
	for (size_t i = 0; i < n; i++) {
		struct json_object *e = json_object_array_get_idx(v, i);
		struct net_nameserver ns;

		if (!json_object_is_type(e, json_type_string) ||
		    strlen(json_object_get_string(e)) >= sizeof(cfg->net_nameservers[0]) ||
		    net_nameserver_parse(json_object_get_string(e), &ns) < 0)
			return sbx_error_set(
			    err, SBX_E_INVALID_REQUEST, "network.nameservers",
			    "config key 'network.nameservers[%zu]' must be an "
			    "address with an optional port, such as \"198.18.0.53\" "
			    "or \"[2001:db8::53]:5353\"",
			    i);
		snprintf(cfg->net_nameservers[i], sizeof(cfg->net_nameservers[i]), "%s",
			 json_object_get_string(e));
	}
	cfg->n_net_nameservers = n;
	return 0;
}

static int apply_network(struct json_object *v, struct sandbox_config *cfg, struct sbx_error *err)
{
	if (!json_object_is_type(v, json_type_object))
		return bad_type("network", "an object", err);
	json_object_object_foreach(v, key, kv)
	{
		size_t k;

		if (strcmp(key, "internal_ranges") == 0) {
			if (apply_net_ranges(kv, cfg, err) < 0)
				return -1;
			continue;
		}
		if (strcmp(key, "nameservers") == 0) {
			if (apply_net_nameservers(kv, cfg, err) < 0)
				return -1;
			continue;
		}
		if (strcmp(key, "default_policy") == 0) {
			struct net_policy *p = malloc(sizeof(*p));
			int rc =
			    p ? net_policy_from_json(kv, "network.default_policy", NULL, p, err)
			      : sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");

			if (rc == 0)
				net_policy_json(p, cfg->net_default_policy,
						sizeof(cfg->net_default_policy));
			free(p);
			if (rc < 0)
				return -1;
			continue;
		}
		for (k = 0; k < SBX_ARRAY_SIZE(net_keys); k++)
			if (strcmp(key, net_keys[k].name + 8) == 0)
				break;
		if (k == SBX_ARRAY_SIZE(net_keys))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "network",
					     "unknown key '%.60s' in 'network'", key);
		if (apply_key(&net_keys[k], kv, cfg, err) < 0)
			return -1;
	}
	return 0;
}

/* "pool": {"small": 2, ...}: guests kept ready per size (names checked
 * against the sizes by sandbox_config_validate()). */
static int apply_pool(struct json_object *v, struct sandbox_config *cfg, struct sbx_error *err)
{
	size_t n = 0;

	if (!json_object_is_type(v, json_type_object))
		return bad_type("pool", "an object of size: count", err);
	json_object_object_foreach(v, name, cv)
	{
		char key[48];
		int64_t x;

		if (n == SANDBOX_MAX_SIZES)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "pool",
					     "config key 'pool' holds at most %d sizes",
					     SANDBOX_MAX_SIZES);
		if (strlen(name) == 0 || strlen(name) >= sizeof(cfg->pool[0].size))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "pool",
					     "config key 'pool' names an unknown size");
		snprintf(key, sizeof(key), "pool.%s", name);
		if (get_count(cv, key, 0, 1024, &x, err) < 0)
			return -1;
		snprintf(cfg->pool[n].size, sizeof(cfg->pool[n].size), "%s", name);
		cfg->pool[n].count = (int)x;
		n++;
	}
	cfg->n_pool = n;
	return 0;
}

/* "execution_pool": {"python": 1, "node": 1}: execution guests kept
 * ready per runtime (names checked by sandbox_config_validate). */
static int apply_execution_pool(struct json_object *v, struct sandbox_config *cfg,
				struct sbx_error *err)
{
	size_t n = 0;

	if (!json_object_is_type(v, json_type_object))
		return bad_type("execution_pool", "an object of runtime: count", err);
	json_object_object_foreach(v, name, cv)
	{
		char key[48];
		int64_t x;

		if (n == SANDBOX_EXECUTION_RUNTIMES || strlen(name) == 0 ||
		    strlen(name) >= sizeof(cfg->execution_pool[0].runtime))
			return sbx_error_set(
			    err, SBX_E_INVALID_REQUEST, "execution_pool",
			    "config key 'execution_pool' names an unknown runtime");
		snprintf(key, sizeof(key), "execution_pool.%s", name);
		if (get_count(cv, key, 0, 1024, &x, err) < 0)
			return -1;
		snprintf(cfg->execution_pool[n].runtime, sizeof(cfg->execution_pool[n].runtime),
			 "%s", name);
		cfg->execution_pool[n].count = (int)x;
		n++;
	}
	cfg->n_execution_pool = n;
	return 0;
}

int api_config_parse(const char *json, size_t len, struct sandbox_config *cfg,
		     struct sbx_error *err)
{
	struct json_tokener *tok;
	struct json_object *root;
	enum json_tokener_error jerr;
	size_t end;
	int rc = -1;

	if (len > CONFIG_MAX_BYTES || memchr(json, '\0', len))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "config",
				     "the config file is not a JSON text");
	tok = json_tokener_new_ex(CONFIG_MAX_DEPTH);
	if (!tok)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	root = json_tokener_parse_ex(tok, json, (int)len);
	jerr = json_tokener_get_error(tok);
	end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	while (end < len && strchr(" \t\r\n", json[end]))
		end++;
	if (jerr != json_tokener_success || !root || end != len) {
		sbx_error_set(err, SBX_E_INVALID_REQUEST, "config",
			      "the config file is not valid JSON (%s near byte %zu)",
			      jerr == json_tokener_success ? "trailing data"
							   : json_tokener_error_desc(jerr),
			      end);
		goto out;
	}
	if (!json_object_is_type(root, json_type_object)) {
		sbx_error_set(err, SBX_E_INVALID_REQUEST, "config",
			      "the config file must hold one JSON object");
		goto out;
	}
	if (api_json_has_duplicate_keys(json, len, root)) {
		sbx_error_set(err, SBX_E_INVALID_REQUEST, "config",
			      "the config file names a key more than once");
		goto out;
	}
	json_object_object_foreach(root, key, val)
	{
		size_t i;

		if (strcmp(key, "sizes") == 0) {
			if (apply_sizes(val, cfg, err) < 0)
				goto out;
			continue;
		}
		if (strcmp(key, "hosts") == 0) {
			if (apply_hosts(val, cfg, err) < 0)
				goto out;
			continue;
		}
		if (strcmp(key, "network") == 0) {
			if (apply_network(val, cfg, err) < 0)
				goto out;
			continue;
		}
		if (strcmp(key, "pool") == 0) {
			if (apply_pool(val, cfg, err) < 0)
				goto out;
			continue;
		}
		if (strcmp(key, "execution_pool") == 0) {
			if (apply_execution_pool(val, cfg, err) < 0)
				goto out;
			continue;
		}
		for (i = 0; i < SBX_ARRAY_SIZE(keys); i++)
			if (strcmp(key, keys[i].name) == 0)
				break;
		if (i == SBX_ARRAY_SIZE(keys)) {
			char name[64];
			snprintf(name, sizeof(name), "%.60s", key);
			sbx_error_set(err, SBX_E_INVALID_REQUEST, name, "unknown config key '%s'",
				      name);
			goto out;
		}
		if (apply_key(&keys[i], val, cfg, err) < 0)
			goto out;
	}
	rc = 0;
out:
	json_object_put(root);
	return rc;
}

int api_config_load(const char *path, struct sandbox_config *cfg, struct sbx_error *err)
{
	_cleanup_free_ char *text = NULL;
	size_t len = 0;

	text = sbx_read_file(path, CONFIG_MAX_BYTES, &len);
	if (!text)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "config",
				     "cannot read config file '%s': %s", path,
				     errno == EFBIG ? "larger than 1 MiB" : strerror(errno));
	return api_config_parse(text, len, cfg, err);
}
