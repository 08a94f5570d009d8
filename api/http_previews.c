/* api/http_previews.c: preview URLs (docs/api.md "Previews"): the routes
 * that create, list and revoke them, and the front door of a preview's
 * host name.
 *
 * A request whose Host is PORT-TOKEN.<preview_domain> (any case, any
 * ":port" after it) is no API request: http.c hands it here before any
 * route is matched and before any API key is asked for. The token's hash
 * names a live preview of that very port (sandbox/previews.c), whose
 * owner's sandbox then gets the request through the ports proxy
 * (http_ports.c, `preview`), with the path as it came. Anything else on
 * such a host is 404 not_found in the API's error shape, never proxied.
 * The token is never logged (the preview's id is). No lock of its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http-priv.h"

#define MOD "api"

/* ---------------------------------------------------------------- routes */

static struct json_object *preview_encode(const struct sandbox_preview *p, const char *url)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "object", json_object_new_string("preview"));
	json_object_object_add(o, "id", json_object_new_string(p->id));
	json_object_object_add(o, "sandbox_id", json_object_new_string(p->sandbox_id));
	json_object_object_add(o, "port", json_object_new_int((int)p->port));
	if (url)
		json_object_object_add(o, "url", json_object_new_string(url));
	json_object_object_add(o, "created_at", api_time_encode(p->created_at_ms));
	json_object_object_add(o, "expires_at", api_time_encode(p->expires_at_ms));
	json_object_object_add(o, "revoked", json_object_new_boolean(p->revoked_at_ms != 0));
	return o;
}

/* The body of a create: {} or {"expires_in_seconds": N} (or none). */
static int create_decode(struct req *r, int *expires_in_s, struct sbx_error *err)
{
	const struct sandbox_config *cfg = r->srv->cfg;
	struct json_object *obj, *val;
	int64_t x;
	int rc = 0;

	*expires_in_s = 3600 < cfg->preview_max_ttl_seconds ? 3600 : cfg->preview_max_ttl_seconds;
	if (api_json_one_field(r->body.data, r->body.len, "expires_in_seconds", false, &obj, &val,
			       err) < 0)
		return -1;
	if (val) {
		rc = api_json_get_int(val, "expires_in_seconds", 1, cfg->preview_max_ttl_seconds,
				      &x, err);
		if (rc == 0)
			*expires_in_s = (int)x;
	}
	json_object_put(obj);
	return rc;
}

/* http://PORT-TOKEN.<preview_domain>[:port]/ as a browser reaches it:
 * preview_public_port (443: https, 80: http, without a port), else the
 * daemon's own port. */
static void preview_url(struct req *r, const struct sandbox_preview *p, const char *token,
			char *out, size_t len)
{
	const struct sandbox_config *cfg = r->srv->cfg;
	unsigned port =
	    cfg->preview_public_port ? (unsigned)cfg->preview_public_port : api_server_port(r->srv);
	char suffix[16] = "";

	if (port != 80 && port != 443)
		snprintf(suffix, sizeof suffix, ":%u", port);
	snprintf(out, len, "%s://%u-%s.%s%s/", port == 443 ? "https" : "http", p->port, token,
		 cfg->preview_domain, suffix);
}

enum MHD_Result api_previews_handle(struct req *r)
{
	struct sandbox_preview p, *list = NULL;
	char token[SANDBOX_PREVIEW_TOKEN_LEN + 1], url[400];
	struct json_object *data;
	struct sbx_error err;
	enum MHD_Result ret;
	int ttl;
	size_t n = 0;

	sbx_error_clear(&err);
	if (r->pid == 0)
		return api_reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "port",
					   "port must be a number 1..65535 (the path is "
					   "/v1/sandboxes/{id}/ports/{port}/previews)");
	if (r->method == API_POST) {
		if (create_decode(r, &ttl, &err) < 0 ||
		    sandbox_preview_create(r->srv->svc, r->account_id, r->id, r->pid, ttl, &p,
					   token, &err) < 0)
			return api_reply_error(r->conn, &err);
		preview_url(r, &p, token, url, sizeof url);
		ret = api_reply_json(r->conn, 201, preview_encode(&p, url), 0, NULL);
		explicit_bzero(token, sizeof token);
		explicit_bzero(url, sizeof url);
		return ret;
	}
	if (sandbox_preview_list(r->srv->svc, r->account_id, r->id, r->pid, &list, &n, &err) < 0)
		return api_reply_error(r->conn, &err);
	data = json_object_new_array();
	for (size_t i = 0; i < n; i++)
		json_object_array_add(data, preview_encode(&list[i], NULL));
	free(list);
	return api_reply_json(r->conn, 200, api_list_encode(data, false), 0, NULL);
}

enum MHD_Result api_preview_revoke_handle(struct req *r)
{
	struct sandbox_preview p;
	struct sbx_error err;

	sbx_error_clear(&err);
	if (sandbox_preview_revoke(r->srv->svc, r->account_id, r->id, r->sub_id, &p, &err) < 0)
		return api_reply_error(r->conn, &err);
	return api_reply_json(r->conn, 200, preview_encode(&p, NULL), 0, NULL);
}

/* ------------------------------------------------------------- the host */

enum MHD_Result api_preview_host_route(struct req *r)
{
	return api_reply_new_error(r->conn, SBX_E_NOT_FOUND, NULL, "no such preview");
}

/* The Host's name (without ":port") when it is preview_domain or one
 * label under it: that label ("" for the domain itself) into label. */
static bool host_split(const struct sandbox_config *cfg, const char *host, char *label,
		       size_t label_len)
{
	size_t dn = strlen(cfg->preview_domain), hn;
	const char *colon;

	if (!host)
		return false;
	colon = strrchr(host, ':');
	hn = colon ? (size_t)(colon - host) : strlen(host);
	if (hn > 0 && host[hn - 1] == '.')
		hn--; /* a fully qualified name's root dot */
	if (hn == dn && strncasecmp(host, cfg->preview_domain, dn) == 0) {
		label[0] = '\0';
		return true;
	}
	if (hn < dn + 2 || host[hn - dn - 1] != '.' ||
	    strncasecmp(host + hn - dn, cfg->preview_domain, dn) != 0)
		return false;
	hn -= dn + 1;
	label[0] = '\0';
	if (hn >= label_len || memchr(host, '.', hn))
		return true; /* under the domain, and no preview's: refused */
	for (size_t i = 0; i < hn; i++)
		label[i] = (char)(host[i] >= 'A' && host[i] <= 'Z' ? host[i] + 32 : host[i]);
	label[hn] = '\0';
	return true;
}

bool api_preview_host_is(const struct sandbox_config *cfg, struct MHD_Connection *c)
{
	char label[80];

	return host_split(cfg, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host"), label,
			  sizeof label);
}

/* "PORT-TOKEN": the port (1..65535, no leading zero) and the token. */
static bool label_parse(const char *label, uint32_t *port, const char **token)
{
	uint32_t v = 0;
	const char *p = label;

	if (*p < '1' || *p > '9')
		return false;
	for (; *p >= '0' && *p <= '9' && p - label < 6; p++)
		v = v * 10 + (uint32_t)(*p - '0');
	if (*p != '-' || v > 65535)
		return false;
	*port = v;
	*token = p + 1;
	return true;
}

/* The methods a guest's server gets on its preview's host. */
static bool method_ok(const char *m)
{
	static const char *const ok[] = {"GET",	   "HEAD",  "POST",   "PUT",
					 "DELETE", "PATCH", "OPTIONS"};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(ok); i++)
		if (strcmp(m, ok[i]) == 0)
			return true;
	return false;
}

enum MHD_Result api_preview_host_begin(struct req *r, const char *url, const char *method)
{
	const char *host = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Host");
	struct sandbox_preview p;
	struct sbx_error err;
	const char *token = "";
	char label[80];
	uint32_t port = 0;

	sbx_error_clear(&err);
	r->route = R_PREVIEW_HOST;
	if (!method_ok(method)) {
		sbx_error_set(&err, SBX_E_METHOD_NOT_ALLOWED, NULL,
			      "method not allowed on a preview");
		return api_reply_reject(r->conn, &err,
					"GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS");
	}
	if (!host_split(r->srv->cfg, host, label, sizeof label) ||
	    !label_parse(label, &port, &token) ||
	    sandbox_preview_resolve(r->srv->svc, port, token, &p, &err) < 0) {
		if (err.code == SBX_OK)
			sbx_error_set(&err, SBX_E_NOT_FOUND, NULL,
				      "no such preview: a preview's host name is "
				      "PORT-TOKEN.%s",
				      r->srv->cfg->preview_domain);
		return api_reply_reject(r->conn, &err, NULL);
	}
	snprintf(r->account_id, sizeof r->account_id, "%s", p.account_id);
	snprintf(r->id, sizeof r->id, "%s", p.sandbox_id);
	r->pid = p.port;
	api_reqctx_enter(r->request_id, r->account_id, r->id);
	sbx_debug(MOD, "preview %s: %s to port %u", p.id, method, p.port);
	/* as the ports route: the connection is held until the answer went */
	api_conn_deadline(r->conn, r->srv->cfg->file_transfer_timeout_ms);
	return api_ports_begin(r->srv->ports, r, method, url[0] == '/' ? url + 1 : url, true,
			       &r->port);
}
