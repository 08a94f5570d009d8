/* sandbox: egress policies (docs/network.md): the default of a create
 * that names none, the limits a tenant's policy is checked against, and
 * a policy change. The policy is enforced where guest connections are
 * relayed (network/net_connect); this file only keeps it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../store/store.h"
#include "sandbox-priv.h"
#include "sandbox.h"

#define MOD "network"

void sandbox_network_limits(const struct sandbox_config *cfg, struct net_limits *out)
{
	out->allow_open = cfg->net_allow_open;
	out->max_rules = cfg->net_max_rules;
}

/* Add a name rule to the allow list unless it is there or the list is
 * full. */
static void allow_name(struct net_policy *p, const char *name, size_t max)
{
	struct net_rule r;

	if (net_rule_parse(name, "network", &r, NULL) < 0)
		return;
	for (size_t i = 0; i < p->n_allow; i++)
		if (p->allow[i].kind == r.kind && strcmp(p->allow[i].name, r.name) == 0 &&
		    p->allow[i].port_lo == 0)
			return;
	if (p->n_allow < max)
		p->allow[p->n_allow++] = r;
	else
		sbx_warn(MOD, "default policy: no room for apt source %s (max_rules)", name);
}

int sandbox_network_default_build(const struct sandbox_config *cfg, const char *apt_dir,
				  const char *apt_list, char out[NET_POLICY_JSON_MAX],
				  struct sbx_error *err)
{
	struct net_policy *p = malloc(sizeof(*p));
	char hosts[32][NET_NAME_MAX];
	size_t max = cfg->net_max_rules > 0 && cfg->net_max_rules <= NET_RULES_MAX
			 ? (size_t)cfg->net_max_rules
			 : NET_RULES_MAX;
	int rc = -1;

	if (!p)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	if (!cfg->net_default_policy[0])
		net_policy_none(p);
	else if (net_policy_parse(cfg->net_default_policy, strlen(cfg->net_default_policy),
				  "network.default_policy", NULL, p, err) < 0)
		goto out;
	if (cfg->net_default_apt_sources) {
		size_t n = net_apt_hosts(apt_dir, apt_list, hosts, SBX_ARRAY_SIZE(hosts));

		if (p->egress == NET_EGRESS_NONE)
			p->egress = NET_EGRESS_ALLOW_LIST;
		for (size_t i = 0; i < n; i++)
			allow_name(p, hosts[i], max);
		if (n == 0)
			sbx_warn(MOD, "default policy: no apt source names a host");
	}
	if (p->egress == NET_EGRESS_ALLOW_LIST && p->n_allow == 0)
		p->egress = NET_EGRESS_NONE; /* nothing to allow: none */
	if (p->n_allow > max || p->n_deny > max) {
		sbx_error_set(err, SBX_E_INVALID_REQUEST, "network.default_policy",
			      "the default policy holds more than network.max_rules (%zu) rules",
			      max);
		goto out;
	}
	if (p->egress == NET_EGRESS_OPEN && !cfg->net_allow_open) {
		sbx_error_set(err, SBX_E_INVALID_REQUEST, "network.default_policy",
			      "the default policy is 'open' but network.allow_open is false");
		goto out;
	}
	if (net_policy_json(p, out, NET_POLICY_JSON_MAX) < 0) {
		sbx_error_set(err, SBX_E_INVALID_REQUEST, "network.default_policy",
			      "the default policy is too long");
		goto out;
	}
	rc = 0;
out:
	free(p);
	return rc;
}

int sandbox_network_init(struct sandbox_svc *svc, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;

	if (sandbox_network_default_build(cfg, "/etc/apt/sources.list.d", "/etc/apt/sources.list",
					  svc->net_default, err) < 0)
		return -1;
	net_env_init(&svc->net);
	for (size_t i = 0; i < cfg->n_net_internal_ranges; i++)
		if (net_env_add_internal(&svc->net, cfg->net_internal_ranges[i],
					 "network.internal_ranges", err) < 0)
			return -1;
	for (size_t i = 0; i < cfg->n_net_nameservers; i++)
		if (net_env_add_nameserver(&svc->net, cfg->net_nameservers[i],
					   "network.nameservers", err) < 0)
			return -1;
	if (net_env_host_addrs(&svc->net) < 0)
		sbx_warn(MOD, "cannot list this host's addresses");
	sbx_info(MOD, "default policy %s", svc->net_default);
	if (cfg->n_net_nameservers > 0)
		sbx_info(MOD, "names resolve through %zu nameserver(s), first %s",
			 cfg->n_net_nameservers, cfg->net_nameservers[0]);
	return 0;
}

const char *sandbox_network_default(const struct sandbox_svc *svc)
{
	return svc->net_default[0] ? svc->net_default : STORE_NETWORK_NONE;
}

int sandbox_network_set(struct sandbox_svc *svc, const char *account_id, const char *id,
			const char *network, struct sandbox_view *out, struct sbx_error *err)
{
	struct store_sandbox *row = malloc(sizeof(*row));
	int rc;

	if (!row)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	rc = store_sandbox_network_set(svc->store, account_id, id, network, row, err);
	if (rc == 0)
		sandbox_view_from_row(row, sbx_wall_ms(), out);
	free(row);
	return rc;
}
