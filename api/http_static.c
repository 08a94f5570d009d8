/* api/http_static.c: the files the daemon serves itself (api/assets.h):
 * the dashboard (GET / and /dashboard), the API reference page, their
 * scripts and styles, and GET /v1/openapi.json. No auth: they hold no
 * tenant data (the page calls the public API with the user's key). The
 * security headers of every reply are api/reply.c's (docs/dashboard.md,
 * "Security").
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "assets.h"
#include "http-priv.h"

int api_static_find(const char *url)
{
	for (size_t i = 0; i < api_assets_count; i++)
		if (strcmp(url, api_assets[i].path) == 0)
			return (int)i;
	return -1;
}

enum MHD_Result api_static_reply(struct MHD_Connection *c, int asset)
{
	const struct api_asset *a = &api_assets[asset];
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a->type);
	/* compiled in: a new binary may serve new files under the same name */
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	api_security_headers(resp, a->page);
	api_reqctx_header(resp);
	ret = api_queue_response(c, 200, resp);
	MHD_destroy_response(resp);
	return ret;
}

enum MHD_Result api_execution_list_handle(struct req *r)
{
	const char *limit_s = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "limit");
	struct sandbox_execution_view *views = NULL;
	struct json_object *o, *data;
	struct sbx_error err;
	bool more = false;
	size_t n = 0;
	long limit = 20;

	sbx_error_clear(&err);
	if (limit_s) {
		char *end;
		errno = 0;
		limit = strtol(limit_s, &end, 10);
		if (limit_s[0] < '0' || limit_s[0] > '9' || *end || errno || limit < 1 ||
		    limit > 100)
			return api_reply_new_error(r->conn, SBX_E_INVALID_REQUEST, "limit",
						   "limit must be an integer from 1 to 100");
	}
	if (sandbox_execution_list(r->srv->svc, r->account_id, (int)limit, &views, &n, &more,
				   &err) < 0)
		return api_reply_error(r->conn, &err);
	data = json_object_new_array();
	for (size_t i = 0; i < n; i++)
		json_object_array_add(data, api_execution_view_encode(&views[i]));
	free(views);
	o = json_object_new_object();
	json_object_object_add(o, "object", json_object_new_string("list"));
	json_object_object_add(o, "data", data);
	json_object_object_add(o, "has_more", json_object_new_boolean(more));
	return api_reply_json(r->conn, 200, o, 0, NULL);
}
