/* api/decode.c: request decoders (json-c), from a body to the use case's
 * request. Pure functions: no HTTP here, so the unit tests and the fuzzer
 * reach them directly through api-priv.h. The helpers they share with
 * the encoders are json.c's. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api-priv.h"

int api_create_decode(const char *body, size_t len, const struct sandbox_config *cfg,
		      struct api_create_body *out, struct sbx_error *err)
{
	struct json_object *obj = api_json_parse_object(body, len, err);
	int rc = -1;

	memset(out, 0, sizeof(*out));
	if (!obj)
		return -1;
	json_object_object_foreach(obj, key, val)
	{
		if (strcmp(key, "size") == 0) {
			const char *s = NULL;
			size_t n = 0;
			if (api_json_get_string(val, "size", &s, &n, err) < 0)
				goto out;
			if (n == 0 || n >= sizeof(out->size_buf) || memchr(s, '\0', n)) {
				char names[SANDBOX_MAX_SIZES * 20];

				sbx_error_set(err, SBX_E_INVALID_REQUEST, "size",
					      "unknown size; the sizes are %s (GET /v1/limits has "
					      "their prices)",
					      sandbox_config_size_names(cfg, names, sizeof(names)));
				goto out;
			}
			memcpy(out->size_buf, s, n + 1);
			out->req.size = out->size_buf;
		} else if (strcmp(key, "timeout_minutes") == 0) {
			int64_t x;
			if (api_json_get_int(val, "timeout_minutes", 1, cfg->max_timeout_minutes,
					     &x, err) < 0)
				goto out;
			out->req.timeout_minutes = (int)x;
		} else if (strcmp(key, "metadata") == 0) {
			if (api_metadata_decode(val, &out->metadata, NULL, err) < 0)
				goto out;
			out->req.metadata = &out->metadata;
		} else if (strcmp(key, "network") == 0) {
			if (api_network_decode(val, cfg, out->network_buf, err) < 0)
				goto out;
			out->req.network = out->network_buf;
		} else if (strcmp(key, "timeout_action") == 0) {
			const char *s = NULL;
			size_t n = 0;
			if (api_json_get_string(val, "timeout_action", &s, &n, err) < 0)
				goto out;
			if (n == 6 && memcmp(s, "expire", 6) == 0) {
				out->req.timeout_action = SANDBOX_ON_TIMEOUT_EXPIRE;
			} else if (n == 5 && memcmp(s, "pause", 5) == 0) {
				out->req.timeout_action = SANDBOX_ON_TIMEOUT_PAUSE;
			} else {
				sbx_error_set(err, SBX_E_INVALID_REQUEST, "timeout_action",
					      "timeout_action must be 'expire' (the default: the "
					      "sandbox ends at its expiry) or 'pause'");
				goto out;
			}
		} else if (strcmp(key, "snapshot") == 0) {
			const char *s = NULL;
			size_t n = 0;
			if (api_json_get_string(val, "snapshot", &s, &n, err) < 0)
				goto out;
			if (n == 0 || n >= sizeof(out->snapshot_buf) || memchr(s, '\0', n)) {
				sbx_error_set(err, SBX_E_INVALID_REQUEST, "snapshot",
					      "snapshot must be a snapshot's id (snap_...; GET "
					      "/v1/snapshots lists them)");
				goto out;
			}
			memcpy(out->snapshot_buf, s, n + 1);
			out->req.snapshot = out->snapshot_buf;
		} else {
			api_json_unknown_field(key, err);
			goto out;
		}
	}
	rc = 0;
out:
	json_object_put(obj);
	return rc;
}

int api_network_decode(struct json_object *v, const struct sandbox_config *cfg,
		       char out[NET_POLICY_JSON_MAX], struct sbx_error *err)
{
	struct net_policy *p = malloc(sizeof(*p));
	struct net_limits lim;
	int rc;

	if (!p)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	sandbox_network_limits(cfg, &lim);
	rc = net_policy_from_json(v, "network", &lim, p, err);
	if (rc == 0 && net_policy_json(p, out, NET_POLICY_JSON_MAX) < 0)
		rc = sbx_error_set(err, SBX_E_INVALID_REQUEST, "network", "the policy is too long");
	free(p);
	return rc;
}

int api_network_body_decode(const char *body, size_t len, const struct sandbox_config *cfg,
			    char out[NET_POLICY_JSON_MAX], struct sbx_error *err)
{
	struct json_object *obj = api_json_parse_object(body, len, err);
	int rc;

	if (!obj)
		return -1;
	rc = api_network_decode(obj, cfg, out, err);
	json_object_put(obj);
	return rc;
}

int api_timeout_decode(const char *body, size_t len, const struct sandbox_config *cfg,
		       bool required, int *timeout_minutes, struct sbx_error *err)
{
	struct json_object *obj, *val;
	int64_t x = 0;
	int rc;

	*timeout_minutes = 0;
	if (api_json_one_field(body, len, "timeout_minutes", required, &obj, &val, err) < 0)
		return -1;
	rc = val ? api_json_get_int(val, "timeout_minutes", 1, cfg->max_timeout_minutes, &x, err)
		 : 0;
	*timeout_minutes = rc == 0 ? (int)x : 0;
	json_object_put(obj);
	return rc;
}

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
		const char *s = NULL;
		size_t n = 0;

		if (strcmp(key, "network") == 0) {
			/* docs/network.md: one-shot executions never have one */
			sbx_error_set(err, SBX_E_INVALID_REQUEST, "network",
				      "one-shot executions never have a network; create a "
				      "sandbox with a network policy instead");
			goto out;
		}
		if (strcmp(key, "runtime") == 0) {
			if (!json_object_is_type(val, json_type_string) ||
			    (size_t)json_object_get_string_len(val) >= sizeof(out->runtime)) {
				sbx_error_set(err, SBX_E_INVALID_REQUEST, "runtime",
					      "'runtime' must be \"python\" or \"node\"");
				goto out;
			}
			memcpy(out->runtime, json_object_get_string(val),
			       (size_t)json_object_get_string_len(val) + 1);
		} else if (strcmp(key, "timeout_seconds") == 0) {
			int64_t x;

			if (api_json_get_int(val, "timeout_seconds", 1, 86400, &x, err) < 0)
				goto out;
			out->req.timeout_seconds = (int)x;
		} else if (strcmp(key, "code") == 0) {
			if (api_json_get_string(val, "code", &s, &n, err) < 0)
				goto out;
			free(out->code);
			out->code = strndup(s, n);
			if (!out->code) {
				sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
				goto out;
			}
			out->req.code_len = n;
		} else if (strcmp(key, "metadata") == 0) {
			if (api_metadata_decode(val, &out->metadata, NULL, err) < 0)
				goto out;
			out->req.metadata = &out->metadata;
		} else {
			api_json_unknown_field(key, err);
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

int api_key_create_decode(const char *body, size_t len, unsigned *scopes, bool *has_scopes,
			  struct sbx_error *err)
{
	struct json_object *obj = api_json_parse_object(body, len, err);
	char names[SANDBOX_SCOPES_MAX] = "";
	int rc = 0;

	*scopes = 0;
	*has_scopes = false;
	if (!obj)
		return -1;
	json_object_object_foreach(obj, key, val)
	{
		if (strcmp(key, "scopes") != 0) {
			rc = api_json_unknown_field(key, err);
			break;
		}
		size_t n = json_object_is_type(val, json_type_array) ? json_object_array_length(val)
								     : SIZE_MAX,
		       used = 0;
		if (n > 8) {
			rc = sbx_error_set(err, SBX_E_INVALID_REQUEST, "scopes",
					   "scopes must be an array of at most 8 scope names");
			break;
		}
		for (size_t i = 0; i < n && rc == 0; i++) {
			struct json_object *s = json_object_array_get_idx(val, i);
			const char *name = json_object_get_string(s);
			size_t l = name ? strlen(name) : 0;

			if (!json_object_is_type(s, json_type_string) || l == 0 || l > 32 ||
			    strcspn(name, " ,") != l)
				rc = sbx_error_set(err, SBX_E_INVALID_REQUEST, "scopes",
						   "each scope must be a name like 'sandboxes'");
			else
				used += (size_t)snprintf(names + used, SANDBOX_SCOPES_MAX - used,
							 "%s%s", used ? " " : "", name);
		}
		if (rc == 0)
			rc = sandbox_scopes_parse(names, scopes, err);
		*has_scopes = rc == 0;
	}
	json_object_put(obj);
	return rc;
}

bool api_env_key_valid(const char *key, size_t len)
{
	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = key[i];
		bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
		if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
			return false;
	}
	return true;
}

void api_exec_body_release(struct api_exec_body *b)
{
	free(b->command);
	free(b->cwd);
	for (size_t i = 0; i < b->n_env; i++)
		free(b->env[i]);
	free(b->env);
	memset(b, 0, sizeof(*b));
}

static int exec_decode_env(struct json_object *val, struct api_exec_body *out,
			   struct sbx_error *err)
{
	size_t n;

	if (!json_object_is_type(val, json_type_object))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "env",
				     "'env' must be an object of string values");
	n = (size_t)json_object_object_length(val);
	if (n > API_ENV_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "env",
				     "'env' may hold at most %d variables", API_ENV_MAX);
	out->env = calloc(n ? n : 1, sizeof(char *));
	if (!out->env)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	json_object_object_foreach(val, k, v)
	{
		size_t klen = strlen(k), vlen;
		char name[48], param[64];
		const char *s;

		api_json_field_name(k, name);
		if (!api_env_key_valid(k, klen))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "env",
					     "environment variable name '%s' must match "
					     "[A-Za-z_][A-Za-z0-9_]*",
					     name);
		snprintf(param, sizeof(param), "env.%s", name);
		if (!json_object_is_type(v, json_type_string))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
					     "the value of '%s' must be a string", param);
		s = json_object_get_string(v);
		vlen = (size_t)json_object_get_string_len(v);
		if (memchr(s, '\0', vlen))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
					     "the value of '%s' must not contain NUL", param);
		if (out->n_env >= n)
			break;
		char *kv = malloc(klen + vlen + 2);
		if (!kv)
			return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
		memcpy(kv, k, klen);
		kv[klen] = '=';
		memcpy(kv + klen + 1, s, vlen + 1);
		out->env[out->n_env++] = kv;
	}
	return 0;
}

int api_exec_decode(const char *body, size_t len, const struct sandbox_config *cfg,
		    struct api_exec_body *out, struct sbx_error *err)
{
	struct json_object *obj = api_json_parse_object(body, len, err);
	int rc = -1;

	memset(out, 0, sizeof(*out));
	if (!obj)
		return -1;
	json_object_object_foreach(obj, key, val)
	{
		const char *s = NULL;
		size_t n = 0;

		if (strcmp(key, "command") == 0) {
			if (api_json_get_string(val, "command", &s, &n, err) < 0)
				goto out;
			if (n == 0) {
				sbx_error_set(err, SBX_E_INVALID_REQUEST, "command",
					      "'command' must not be empty");
				goto out;
			}
			if (n > cfg->max_command_bytes) {
				sbx_error_set(err, SBX_E_INVALID_REQUEST, "command",
					      "'command' is longer than %zu bytes",
					      cfg->max_command_bytes);
				goto out;
			}
			if (memchr(s, '\0', n)) {
				sbx_error_set(err, SBX_E_INVALID_REQUEST, "command",
					      "'command' must not contain NUL");
				goto out;
			}
			free(out->command);
			out->command = strndup(s, n);
			if (!out->command)
				goto oom;
			out->req.command_len = n;
		} else if (strcmp(key, "timeout_ms") == 0) {
			int64_t x;
			if (api_json_get_int(val, "timeout_ms", 1, UINT32_MAX, &x, err) < 0)
				goto out;
			out->req.has_timeout = true;
			out->req.timeout_ms = (uint32_t)x;
		} else if (strcmp(key, "cwd") == 0) {
			if (api_json_get_string(val, "cwd", &s, &n, err) < 0)
				goto out;
			if (n == 0 || s[0] != '/' || n >= PATH_MAX || memchr(s, '\0', n)) {
				sbx_error_set(err, SBX_E_INVALID_REQUEST, "cwd",
					      "'cwd' must be an absolute path");
				goto out;
			}
			free(out->cwd);
			out->cwd = strndup(s, n);
			if (!out->cwd)
				goto oom;
		} else if (strcmp(key, "env") == 0) {
			if (out->env) {
				sbx_error_set(err, SBX_E_INVALID_REQUEST, "env",
					      "'env' given twice");
				goto out;
			}
			if (exec_decode_env(val, out, err) < 0)
				goto out;
		} else if (strcmp(key, "receipt") == 0) {
			if (!json_object_is_type(val, json_type_boolean)) {
				sbx_error_set(err, SBX_E_INVALID_REQUEST, "receipt",
					      "'receipt' must be true or false");
				goto out;
			}
			out->receipt = json_object_get_boolean(val);
		} else if (strcmp(key, "encoding") == 0) {
			if (api_json_get_string(val, "encoding", &s, &n, err) < 0)
				goto out;
			if (strcmp(s, "utf-8") == 0 && n == 5) {
				out->base64 = false;
			} else if (strcmp(s, "base64") == 0 && n == 6) {
				out->base64 = true;
			} else {
				sbx_error_set(err, SBX_E_INVALID_REQUEST, "encoding",
					      "'encoding' must be 'utf-8' or 'base64'");
				goto out;
			}
		} else {
			api_json_unknown_field(key, err);
			goto out;
		}
	}
	if (!out->command) {
		sbx_error_set(err, SBX_E_INVALID_REQUEST, "command", "'command' is required");
		goto out;
	}
	out->req.command = out->command;
	out->req.cwd = out->cwd;
	out->req.env = (const char *const *)out->env;
	out->req.n_env = out->n_env;
	rc = 0;
	goto out;
oom:
	sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
out:
	json_object_put(obj);
	if (rc < 0)
		api_exec_body_release(out);
	return rc;
}

int api_update_decode(const char *body, size_t len, struct sandbox_metadata *m, bool *clear,
		      struct sbx_error *err)
{
	struct json_object *obj = api_json_parse_object(body, len, err);
	bool seen = false;
	int rc = -1;

	if (!obj)
		return -1;
	json_object_object_foreach(obj, key, val)
	{
		if (strcmp(key, "metadata") == 0) {
			if (api_metadata_decode(val, m, clear, err) < 0)
				goto out;
			seen = true;
		} else {
			api_json_unknown_field(key, err);
			goto out;
		}
	}
	if (!seen) {
		sbx_error_set(err, SBX_E_INVALID_REQUEST, "metadata", "'metadata' is required");
		goto out;
	}
	rc = 0;
out:
	json_object_put(obj);
	return rc;
}
