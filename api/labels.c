/* api/labels.c: the JSON of labels (docs/api.md "Metadata"): a metadata
 * object in a request (the update's body is json.c's), a stored object in
 * a view, usage grouped by a label key; and GET /v1/sandboxes's
 * metadata[KEY]=VALUE filter. The pairs are checked in sandbox/ (sandbox_metadata_add). */
#include <stdio.h>
#include <string.h>

#include "http-priv.h"

int api_metadata_decode(struct json_object *v, struct sandbox_metadata *m, bool *clear,
			struct sbx_error *err)
{
	memset(m, 0, sizeof(*m));
	if (clear)
		*clear = false;
	if (clear && (!v || (json_object_is_type(v, json_type_string) &&
			     json_object_get_string_len(v) == 0))) {
		*clear = true;
		return 0;
	}
	if (!json_object_is_type(v, json_type_object))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "metadata",
				     "'metadata' must be an object of string values");
	json_object_object_foreach(v, key, val)
	{
		const char *s = NULL;
		size_t n = 0;

		if (val && !json_object_is_type(val, json_type_string))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "metadata",
					     "metadata '%.40s' must be a string or null", key);
		if (val) {
			s = json_object_get_string(val);
			n = (size_t)json_object_get_string_len(val);
			if (memchr(s, '\0', n))
				return sbx_error_set(err, SBX_E_INVALID_REQUEST, "metadata",
						     "metadata '%.40s' holds a NUL byte", key);
		}
		if (sandbox_metadata_add(m, "metadata", key, strlen(key), s, n, err) < 0)
			return -1;
	}
	return 0;
}

struct json_object *api_metadata_encode(const char *json)
{
	struct json_object *m = json && *json ? json_tokener_parse(json) : NULL;

	if (!m || !json_object_is_type(m, json_type_object)) {
		json_object_put(m);
		m = json_object_new_object();
	}
	return m;
}

struct json_object *api_usage_groups_encode(const struct sandbox_usage *u)
{
	struct json_object *arr = json_object_new_array();

	for (size_t i = 0; i < u->n_groups; i++) {
		const struct sandbox_usage_group *g = &u->groups[i];
		struct json_object *e = json_object_new_object();

		json_object_object_add(e, "value",
				       g->labeled ? json_object_new_string(g->value) : NULL);
		json_object_object_add(e, "seconds", json_object_new_int64(g->seconds));
		json_object_object_add(e, "cost_micro_usd", json_object_new_int64(g->cost_micro));
		json_object_array_add(arr, e);
	}
	return arr;
}

/* One query argument: metadata[KEY]=VALUE adds a pair to the filter; the
 * first bad one is kept in the walk's error. */
struct filter_walk {
	struct sandbox_metadata *m;
	struct sbx_error *err;
	int rc;
};

static enum MHD_Result filter_arg(void *cls, enum MHD_ValueKind kind, const char *key,
				  const char *value)
{
	struct filter_walk *w = cls;
	size_t n = strlen(key);

	(void)kind;
	if (w->rc < 0 || strncmp(key, "metadata[", 9) != 0)
		return MHD_YES;
	if (n < 11 || key[n - 1] != ']') {
		w->rc = sbx_error_set(w->err, SBX_E_INVALID_REQUEST, "metadata",
				      "filter by labels as metadata[KEY]=VALUE");
		return MHD_YES;
	}
	if (!value || !*value) {
		w->rc = sbx_error_set(w->err, SBX_E_INVALID_REQUEST, "metadata",
				      "a metadata filter's values are not empty");
		return MHD_YES;
	}
	if (sandbox_metadata_add(w->m, "metadata", key + 9, n - 10, value, strlen(value), w->err) <
	    0)
		w->rc = -1;
	return MHD_YES;
}

int api_metadata_filter(struct MHD_Connection *c, struct sandbox_metadata *m, struct sbx_error *err)
{
	struct filter_walk w = {m, err, 0};

	memset(m, 0, sizeof(*m));
	MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, filter_arg, &w);
	return w.rc;
}
