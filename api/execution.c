/* api: POST /v1/sandbox/executions decoding (see api-priv.h). */
#include <string.h>

#include "api-priv.h"

int api_execution_decode(const char *body, size_t len, struct api_execution_body *out,
			 struct sbx_error *err)
{
	struct json_object *obj = api_json_parse_object(body, len, err);
	int rc = -1;

	memset(out, 0, sizeof(*out));
	if (!obj)
		return -1;
	json_object_object_foreach(obj, key, val)
	{
		if (strcmp(key, "runtime") == 0) {
			if (!json_object_is_type(val, json_type_string) ||
			    json_object_get_string_len(val) >= (int)sizeof(out->runtime)) {
				sbx_error_set(err, SBX_E_INVALID_REQUEST, "runtime",
					      "'runtime' must be \"python\" or \"node\"");
				goto out;
			}
			memcpy(out->runtime, json_object_get_string(val),
			       (size_t)json_object_get_string_len(val) + 1);
		} else if (strcmp(key, "timeout_seconds") == 0) {
			int64_t x;

			if (!json_object_is_type(val, json_type_int) ||
			    (x = json_object_get_int64(val)) < 1 || x > 86400) {
				sbx_error_set(err, SBX_E_INVALID_REQUEST, "timeout_seconds",
					      "'timeout_seconds' must be a positive integer");
				goto out;
			}
			out->req.timeout_seconds = (int)x;
		} else if (strcmp(key, "code") == 0) {
			if (!json_object_is_type(val, json_type_string)) {
				sbx_error_set(err, SBX_E_INVALID_REQUEST, "code",
					      "'code' must be a string");
				goto out;
			}
			free(out->code);
			out->code = strndup(json_object_get_string(val),
					    (size_t)json_object_get_string_len(val));
			if (!out->code) {
				sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
				goto out;
			}
			out->req.code_len = (size_t)json_object_get_string_len(val);
		} else {
			sbx_error_set(err, SBX_E_INVALID_REQUEST, key, "unknown field '%.40s'",
				      key);
			goto out;
		}
	}
	if (!out->runtime[0] || !out->code || !out->req.timeout_seconds) {
		const char *miss = !out->runtime[0] ? "runtime"
				   : !out->code	    ? "code"
						    : "timeout_seconds";
		sbx_error_set(err, SBX_E_INVALID_REQUEST, miss, "'%s' is required", miss);
		goto out;
	}
	out->req.runtime = out->runtime;
	out->req.code = out->code;
	rc = 0;
out:
	json_object_put(obj);
	if (rc < 0) {
		free(out->code);
		out->code = NULL;
	}
	return rc;
}
