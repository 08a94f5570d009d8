/* network/policy.c: the egress policy, its rules, JSON both ways and the
 * rules' matching (network.h). */
#include <stdio.h>
#include <string.h>

#include "network.h"

static const char *const egress_names[] = {"none", "allow_list", "open"};

const char *net_egress_name(enum net_egress e)
{
	return (unsigned)e < SBX_ARRAY_SIZE(egress_names) ? egress_names[e] : "none";
}

void net_policy_none(struct net_policy *p)
{
	memset(p, 0, sizeof(*p));
	p->egress = NET_EGRESS_NONE;
}

/* ---------------------------------------------------------------- names */

int net_name_normalize(const char *in, char out[NET_NAME_MAX])
{
	size_t n = strlen(in), label = 0;

	if (n > 0 && in[n - 1] == '.')
		n--; /* "example.com." is "example.com" */
	if (n == 0 || n > NET_NAME_MAX - 1)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)in[i];

		if (c == '.') {
			if (label == 0 || in[i - 1] == '-')
				return -1;
			label = 0;
		} else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			   (c >= 'A' && c <= 'Z') || (c == '-' && label > 0)) {
			if (++label > 63)
				return -1;
		} else {
			return -1;
		}
		out[i] = (char)((c >= 'A' && c <= 'Z') ? c + 32 : c);
	}
	if (label == 0 || in[n - 1] == '-')
		return -1;
	out[n] = '\0';
	return 0;
}

/* "lo" or "lo-hi" (1..65535); -1 when it is neither. */
static int port_parse(const char *s, uint16_t *lo, uint16_t *hi)
{
	unsigned long v[2] = {0, 0};
	int k = 0;

	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s == '-' && k == 0 && v[0] > 0) {
			k = 1;
			continue;
		}
		if (*s < '0' || *s > '9')
			return -1;
		v[k] = v[k] * 10 + (unsigned long)(*s - '0');
		if (v[k] > 65535)
			return -1;
	}
	if (v[0] == 0 || (k == 1 && (v[1] == 0 || v[1] < v[0])))
		return -1;
	*lo = (uint16_t)v[0];
	*hi = (uint16_t)(k ? v[1] : v[0]);
	return 0;
}

static bool has_non_ascii(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s >= 0x80)
			return true;
	return false;
}

/* Split "host:port", "[v6]:port", "[v6/len]:port" or a bare v6 CIDR into
 * host and port text. */
static int split_port(const char *text, char *host, size_t cap, const char **port)
{
	const char *colon;

	*port = NULL;
	if (text[0] == '[') {
		const char *end = strchr(text, ']');
		if (!end || (size_t)(end - text - 1) >= cap)
			return -1;
		memcpy(host, text + 1, (size_t)(end - text - 1));
		host[end - text - 1] = '\0';
		if (end[1] == ':')
			*port = end + 2;
		else if (end[1])
			return -1;
		return 0;
	}
	colon = strchr(text, ':');
	if (colon && strchr(colon + 1, ':'))
		colon = NULL; /* a bare IPv6 address or CIDR: no port */
	if (strlen(text) >= cap)
		return -1;
	snprintf(host, cap, "%s", text);
	if (colon) {
		host[colon - text] = '\0';
		*port = colon + 1;
	}
	return 0;
}

int net_rule_parse(const char *text, const char *param, struct net_rule *out, struct sbx_error *err)
{
	char host[NET_RULE_TEXT_MAX];
	const char *port;

	memset(out, 0, sizeof(*out));
	if (has_non_ascii(text))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
				     "internationalized names are not supported: give the "
				     "xn-- (punycode) form");
	if (strlen(text) >= NET_RULE_TEXT_MAX || split_port(text, host, sizeof(host), &port) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
				     "a rule is a domain, *.domain, address or CIDR, with an "
				     "optional :port or :port-port");
	if (port && port_parse(port, &out->port_lo, &out->port_hi) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
				     "a port is 1..65535, or a range lo-hi");
	if (net_cidr_parse(host, &out->range) == 0) {
		out->kind = NET_RULE_CIDR;
		return 0;
	}
	if (strchr(host, ':') || strchr(host, '/') ||
	    (host[0] && strspn(host, "0123456789.") == strlen(host)))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
				     "'%.80s' is not a valid address or CIDR (host bits must "
				     "be zero)",
				     host);
	out->kind = NET_RULE_NAME;
	if (strncmp(host, "*.", 2) == 0)
		out->kind = NET_RULE_SUFFIX;
	if (net_name_normalize(host + (out->kind == NET_RULE_SUFFIX ? 2 : 0), out->name) < 0 ||
	    strchr(out->name, '*'))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
				     "'%.80s' is not a valid domain name (letters, digits and "
				     "hyphens; a wildcard only as a leading '*.')",
				     host);
	return 0;
}

void net_rule_text(const struct net_rule *r, char out[NET_RULE_TEXT_MAX])
{
	char host[NET_NAME_MAX + 4], port[14] = "";
	bool v6 = r->kind == NET_RULE_CIDR && r->range.family == 6;

	if (r->kind == NET_RULE_CIDR) {
		char a[64];
		net_addr_text(&r->range, a, sizeof(a));
		if (r->range.prefix != (r->range.family == 4 ? 32u : 128u))
			snprintf(host, sizeof(host), "%s/%u", a, r->range.prefix);
		else
			snprintf(host, sizeof(host), "%s", a);
	} else {
		snprintf(host, sizeof(host), "%s%s", r->kind == NET_RULE_SUFFIX ? "*." : "",
			 r->name);
	}
	if (r->port_lo && r->port_lo == r->port_hi)
		snprintf(port, sizeof(port), ":%u", r->port_lo);
	else if (r->port_lo)
		snprintf(port, sizeof(port), ":%u-%u", r->port_lo, r->port_hi);
	if (v6 && port[0])
		snprintf(out, NET_RULE_TEXT_MAX, "[%s]%s", host, port);
	else
		snprintf(out, NET_RULE_TEXT_MAX, "%s%s", host, port);
}

/* ------------------------------------------------------------- matching */

static bool port_ok(const struct net_rule *r, uint16_t port)
{
	return r->port_lo == 0 || (port >= r->port_lo && port <= r->port_hi);
}

bool net_rule_match_name(const struct net_rule *r, const char *name, uint16_t port)
{
	size_t n, s;

	if (!port_ok(r, port))
		return false;
	if (r->kind == NET_RULE_NAME)
		return strcmp(r->name, name) == 0;
	if (r->kind != NET_RULE_SUFFIX)
		return false;
	n = strlen(name);
	s = strlen(r->name);
	return n > s + 1 && name[n - s - 1] == '.' && strcmp(name + n - s, r->name) == 0;
}

bool net_rule_match_addr(const struct net_rule *r, const struct net_range *addr, uint16_t port)
{
	return r->kind == NET_RULE_CIDR && port_ok(r, port) && net_range_contains(&r->range, addr);
}

/* ----------------------------------------------------------------- JSON */

static int rules_from_json(struct json_object *a, const char *param, const char *list, int max,
			   struct net_rule *out, size_t *n, struct sbx_error *err)
{
	char p[96];
	size_t len;

	snprintf(p, sizeof(p), "%s.%s", param, list);
	if (!json_object_is_type(a, json_type_array))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, p, "'%s' must be a list of rules",
				     p);
	len = json_object_array_length(a);
	if (len > (size_t)max)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, p, "'%s' holds at most %d rules",
				     p, max);
	for (size_t i = 0; i < len; i++) {
		struct json_object *e = json_object_array_get_idx(a, i);
		const char *s;

		snprintf(p, sizeof(p), "%s.%s[%zu]", param, list, i);
		if (!json_object_is_type(e, json_type_string))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, p, "'%s' must be a string",
					     p);
		s = json_object_get_string(e);
		if (strlen(s) != (size_t)json_object_get_string_len(e))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, p,
					     "'%s' must not hold NUL", p);
		if (net_rule_parse(s, p, &out[i], err) < 0)
			return -1;
	}
	*n = len;
	return 0;
}

static int egress_from_json(struct json_object *v, const char *p, const struct net_limits *lim,
			    enum net_egress *out, struct sbx_error *err)
{
	const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";

	for (size_t i = 0; i < SBX_ARRAY_SIZE(egress_names); i++)
		if (strcmp(s, egress_names[i]) == 0) {
			*out = (enum net_egress)i;
			if (*out == NET_EGRESS_OPEN && lim && !lim->allow_open)
				return sbx_error_set(err, SBX_E_INVALID_REQUEST, p,
						     "egress 'open' is not allowed on this "
						     "service: use 'allow_list'");
			return 0;
		}
	return sbx_error_set(err, SBX_E_INVALID_REQUEST, p,
			     "'%s' must be 'none', 'allow_list' or 'open'", p);
}

int net_policy_from_json(struct json_object *o, const char *param, const struct net_limits *lim,
			 struct net_policy *out, struct sbx_error *err)
{
	int max = lim && lim->max_rules > 0 && lim->max_rules < NET_RULES_MAX ? lim->max_rules
									      : NET_RULES_MAX;
	bool have_egress = false;
	char p[96], json[NET_POLICY_JSON_MAX];

	net_policy_none(out);
	if (!json_object_is_type(o, json_type_object))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
				     "'%s' must be an object with 'egress', 'allow' and 'deny'",
				     param);
	json_object_object_foreach(o, key, val)
	{
		int rc;

		snprintf(p, sizeof(p), "%s.%.40s", param, key);
		if (strcmp(key, "egress") == 0) {
			rc = egress_from_json(val, p, lim, &out->egress, err);
			have_egress = true;
		} else if (strcmp(key, "allow") == 0) {
			rc = rules_from_json(val, param, "allow", max, out->allow, &out->n_allow,
					     err);
		} else if (strcmp(key, "deny") == 0) {
			rc = rules_from_json(val, param, "deny", max, out->deny, &out->n_deny, err);
		} else {
			rc = sbx_error_set(err, SBX_E_INVALID_REQUEST, p, "unknown key '%s'", p);
		}
		if (rc < 0)
			return -1;
	}
	snprintf(p, sizeof(p), "%s.egress", param);
	if (!have_egress)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, p, "'%s' is required", p);
	if (out->egress == NET_EGRESS_NONE && (out->n_allow || out->n_deny))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, p,
				     "egress 'none' takes no allow or deny rules");
	snprintf(p, sizeof(p), "%s.allow", param);
	if (out->egress == NET_EGRESS_ALLOW_LIST && out->n_allow == 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, p,
				     "egress 'allow_list' needs at least one allow rule");
	if (net_policy_json(out, json, sizeof(json)) < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
				     "the policy is too long (at most %d bytes as JSON)",
				     NET_POLICY_JSON_MAX - 1);
	return 0;
}

int net_policy_parse(const char *text, size_t len, const char *param, const struct net_limits *lim,
		     struct net_policy *out, struct sbx_error *err)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *o;
	int rc;

	if (!tok)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	o = json_tokener_parse_ex(tok, text, (int)len);
	if (!o || json_tokener_get_parse_end(tok) != len) {
		json_object_put(o);
		json_tokener_free(tok);
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param, "'%s' is not valid JSON",
				     param);
	}
	json_tokener_free(tok);
	rc = net_policy_from_json(o, param, lim, out, err);
	json_object_put(o);
	return rc;
}

/* Append the rules as a JSON list of strings (rule texts need no escape:
 * LDH names, addresses, ports, '*', '[', ']', '/', ':' and '-'). */
static int rules_json(const struct net_rule *r, size_t n, char *out, size_t cap, size_t *at)
{
	char t[NET_RULE_TEXT_MAX];
	int w;

	for (size_t i = 0; i <= n; i++) {
		if (i == n) {
			w = snprintf(out + *at, cap - *at, "]");
		} else {
			net_rule_text(&r[i], t);
			w = snprintf(out + *at, cap - *at, "%s\"%s\"", i ? "," : "", t);
		}
		if (w < 0 || (size_t)w >= cap - *at)
			return -1;
		*at += (size_t)w;
	}
	return 0;
}

int net_policy_json(const struct net_policy *p, char *out, size_t cap)
{
	size_t at = 0;
	int w;

	w = snprintf(out, cap, "{\"egress\":\"%s\",\"allow\":[", net_egress_name(p->egress));
	if (w < 0 || (size_t)w >= cap)
		return -1;
	at = (size_t)w;
	if (rules_json(p->allow, p->n_allow, out, cap, &at) < 0)
		return -1;
	w = snprintf(out + at, cap - at, ",\"deny\":[");
	if (w < 0 || (size_t)w >= cap - at)
		return -1;
	at += (size_t)w;
	if (rules_json(p->deny, p->n_deny, out, cap, &at) < 0 || at + 2 > cap)
		return -1;
	out[at++] = '}';
	out[at] = '\0';
	return (int)at;
}
