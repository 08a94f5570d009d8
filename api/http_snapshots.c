/* api/http_snapshots.c: disk snapshots (docs/api.md "Snapshots"): take
 * one of a sandbox (POST /v1/sandboxes/{id}/snapshots, on the server's
 * pool like a pause: a copy of its disk), list, get and delete the
 * account's. Another account's snapshot is 404 on every route. No lock of
 * its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http-priv.h"

#define MOD "api"

struct json_object *api_snapshot_encode(const struct sandbox_snapshot *s)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "object", json_object_new_string("snapshot"));
	json_object_object_add(o, "id", json_object_new_string(s->id));
	json_object_object_add(o, "name", json_object_new_string(s->name));
	json_object_object_add(o, "sandbox_id", json_object_new_string(s->sandbox_id));
	json_object_object_add(o, "disk_gib", json_object_new_int64(s->disk_gib));
	json_object_object_add(o, "bytes", json_object_new_int64(s->bytes));
	json_object_object_add(o, "created_at", api_time_encode(s->created_at_ms));
	json_object_object_add(o, "cost_micro_usd", json_object_new_int64(s->cost_micro));
	return o;
}

/* The body of a snapshot: none, {} or {"name": "..."}. name_buf gets the
 * name ("" for none). */
static int take_decode(struct req *r, char *name_buf, size_t len, struct sbx_error *err)
{
	struct json_object *obj, *val;
	const char *s = NULL;
	size_t n = 0;
	int rc = 0;

	name_buf[0] = '\0';
	if (api_json_one_field(r->body.data, r->body.len, "name", false, &obj, &val, err) < 0)
		return -1;
	if (val) {
		rc = api_json_get_string(val, "name", &s, &n, err);
		if (rc == 0 && (n >= len || memchr(s, '\0', n)))
			rc = sbx_error_set(err, SBX_E_INVALID_REQUEST, "name",
					   "name must be at most %d printable ASCII characters",
					   SANDBOX_SNAPSHOT_NAME_MAX);
		else if (rc == 0)
			memcpy(name_buf, s, n + 1);
	}
	json_object_put(obj);
	return rc;
}

int api_snapshot_take_work(struct req *r, struct sbx_error *err)
{
	struct sandbox_snapshot s;
	char name[SANDBOX_SNAPSHOT_NAME_MAX + 1];

	if (take_decode(r, name, sizeof name, err) < 0 ||
	    sandbox_snapshot_create(r->srv->svc, r->account_id, r->id, name, &s, err) < 0)
		return -1;
	return api_async_out_json(r, 201, api_snapshot_encode(&s)) < 0
		   ? sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory")
		   : 0;
}

enum MHD_Result api_snapshot_take_handle(struct req *r)
{
	return api_async_run(r);
}

enum MHD_Result api_snapshots_handle(struct req *r)
{
	struct sandbox_snapshot *list = NULL;
	struct json_object *data;
	struct sbx_error err;
	size_t n = 0;

	sbx_error_clear(&err);
	if (sandbox_snapshot_list(r->srv->svc, r->account_id, &list, &n, &err) < 0)
		return api_reply_error(r->conn, &err);
	data = json_object_new_array();
	for (size_t i = 0; i < n; i++)
		json_object_array_add(data, api_snapshot_encode(&list[i]));
	free(list);
	return api_reply_json(r->conn, 200, api_list_encode(data, false), 0, NULL);
}

enum MHD_Result api_snapshot_handle(struct req *r)
{
	struct sandbox_snapshot s;
	struct sbx_error err;
	int rc;

	sbx_error_clear(&err);
	rc = r->method == API_DELETE
		 ? sandbox_snapshot_delete(r->srv->svc, r->account_id, r->id, &s, &err)
		 : sandbox_snapshot_get(r->srv->svc, r->account_id, r->id, &s, &err);
	if (rc < 0)
		return api_reply_error(r->conn, &err);
	return api_reply_json(r->conn, 200, api_snapshot_encode(&s), 0, NULL);
}
