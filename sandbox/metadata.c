/* metadata: labels on sandboxes and executions (docs/api.md "Metadata"):
 * checking a pair, the canonical JSON object the store keeps and the
 * idempotency hash reads (the update use case is sandboxes.c's). See
 * sandbox.h. */
#include "sandbox.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../receipt/receipt.h"
#include "../store/store.h"
#include "sandbox-priv.h"

_Static_assert(SANDBOX_METADATA_KEYS_MAX == STORE_METADATA_KEYS_MAX &&
		   SANDBOX_METADATA_KEY_MAX == STORE_METADATA_KEY_MAX &&
		   SANDBOX_METADATA_VALUE_MAX == STORE_METADATA_VALUE_MAX &&
		   SANDBOX_METADATA_BYTES_MAX == STORE_METADATA_BYTES_MAX &&
		   SANDBOX_METADATA_JSON_MAX == STORE_METADATA_MAX,
	       "the API's metadata bounds are the store's");

static bool key_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '.' || c == '-';
}

/* Valid UTF-8 without C0 controls or DEL. */
static bool value_ok(const char *v, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
			return false;
	return receipt_utf8_valid(v, len);
}

int sandbox_metadata_add(struct sandbox_metadata *m, const char *param, const char *key,
			 size_t key_len, const char *value, size_t value_len, struct sbx_error *err)
{
	size_t bytes = key_len + (value ? value_len : 0);

	if (key_len < 1 || key_len > SANDBOX_METADATA_KEY_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
				     "a metadata key is 1..%d characters",
				     SANDBOX_METADATA_KEY_MAX);
	for (size_t i = 0; i < key_len; i++)
		if (!key_char(key[i]))
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
					     "a metadata key is made of A-Z a-z 0-9 _ . -");
	if (value && value_len > SANDBOX_METADATA_VALUE_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
				     "metadata '%.*s': a value is at most %d bytes", (int)key_len,
				     key, SANDBOX_METADATA_VALUE_MAX);
	if (value && !value_ok(value, value_len))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
				     "metadata '%.*s': a value is valid UTF-8 without control "
				     "characters",
				     (int)key_len, key);
	if (m->n >= SANDBOX_METADATA_KEYS_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
				     "metadata can have at most %d keys",
				     SANDBOX_METADATA_KEYS_MAX);
	for (size_t i = 0; i < m->n; i++) {
		if (strlen(m->pairs[i].key) == key_len &&
		    memcmp(m->pairs[i].key, key, key_len) == 0)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
					     "metadata '%.*s' is given twice", (int)key_len, key);
		bytes += strlen(m->pairs[i].key) + strlen(m->pairs[i].value);
	}
	if (bytes > SANDBOX_METADATA_BYTES_MAX)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, param,
				     "metadata keys and values can have at most %d bytes in all",
				     SANDBOX_METADATA_BYTES_MAX);
	struct sandbox_label *l = &m->pairs[m->n++];
	memcpy(l->key, key, key_len);
	l->key[key_len] = '\0';
	l->remove = !value || value_len == 0;
	if (value)
		memcpy(l->value, value, value_len);
	l->value[value ? value_len : 0] = '\0';
	return 0;
}

static int label_cmp(const void *a, const void *b)
{
	return strcmp(((const struct sandbox_label *)a)->key,
		      ((const struct sandbox_label *)b)->key);
}

int sandbox_metadata_json(const struct sandbox_metadata *m, bool patch, char *out, size_t cap)
{
	struct sandbox_label sorted[SANDBOX_METADATA_KEYS_MAX];
	size_t n = m ? m->n : 0;
	struct json_object *o = json_object_new_object();
	int rc = -1;

	if (!o || n > SANDBOX_METADATA_KEYS_MAX)
		goto out;
	if (n)
		memcpy(sorted, m->pairs, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), label_cmp);
	for (size_t i = 0; i < n; i++) {
		if (sorted[i].remove && !patch)
			continue;
		json_object_object_add(o, sorted[i].key,
				       sorted[i].remove ? NULL
							: json_object_new_string(sorted[i].value));
	}
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							      JSON_C_TO_STRING_NOSLASHESCAPE);
	if (s && strlen(s) < cap) {
		memcpy(out, s, strlen(s) + 1);
		rc = 0;
	}
out:
	json_object_put(o);
	return rc;
}

bool sandbox_metadata_lookup(const char *json, const char *key, char *value, size_t cap)
{
	struct json_object *o = json && *json ? json_tokener_parse(json) : NULL, *v;
	bool found = false;

	if (o && json_object_is_type(o, json_type_object) &&
	    json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)) {
		snprintf(value, cap, "%s", json_object_get_string(v));
		found = true;
	}
	json_object_put(o);
	return found;
}
