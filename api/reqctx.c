/* api/reqctx: request ids and the per-thread log context (reqctx.h). */
#include <stdio.h>
#include <string.h>

#include "../util/util.h"
#include "reqctx.h"

static bool sane(const char *v)
{
	size_t n = v ? strlen(v) : 0;

	if (n == 0 || n >= API_REQUEST_ID_MAX)
		return false;
	for (; *v; v++)
		if (!((*v >= 'a' && *v <= 'z') || (*v >= 'A' && *v <= 'Z') ||
		      (*v >= '0' && *v <= '9') || strchr("._:/+=-", *v)))
			return false;
	return true;
}

void api_reqctx_begin(struct MHD_Connection *c, char out[static API_REQUEST_ID_MAX])
{
	const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");

	if (sane(v))
		snprintf(out, API_REQUEST_ID_MAX, "%s", v);
	else if (sbx_random_id("req_", 12, out, API_REQUEST_ID_MAX) < 0)
		snprintf(out, API_REQUEST_ID_MAX, "req_unknown");
	sbx_log_context_set(out, NULL, NULL);
}

void api_reqctx_enter(const char *request_id, const char *account_id, const char *sandbox_id)
{
	sbx_log_context_set(request_id, account_id, sandbox_id);
}

void api_reqctx_header(struct MHD_Response *resp)
{
	const char *rid = sbx_log_request_id();

	if (rid[0])
		MHD_add_response_header(resp, "X-Request-Id", rid);
}
