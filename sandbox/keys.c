/* keys: API keys and their scopes, the keys/auth use case (docs/api.md
 * "Scopes"): authenticate a bearer token, create, list and revoke keys,
 * and the admin's scope edits. See sandbox.h. */
#include "sandbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../store/store.h"
#include "sandbox-priv.h"

/* ------------------------------------------------------------- scopes */

/* The scopes there are, in their canonical order (bit i = 1 << i). */
static const char *const scope_names[] = {"sandboxes", "keys"};

const char *sandbox_scope_name(enum sandbox_scope scope)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(scope_names); i++)
		if (scope == 1u << i)
			return scope_names[i];
	return "";
}

/* The bit of the name p[0..len), or 0 when it names no scope. */
static unsigned scope_bit(const char *p, size_t len)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(scope_names); i++)
		if (strlen(scope_names[i]) == len && strncmp(p, scope_names[i], len) == 0)
			return 1u << i;
	return 0;
}

int sandbox_scopes_parse(const char *s, unsigned *out, struct sbx_error *err)
{
	*out = 0;
	for (const char *p = s; p && *p;) {
		size_t len;
		unsigned bit;

		while (*p == ' ' || *p == ',')
			p++;
		len = strcspn(p, " ,");
		if (len == 0)
			break;
		bit = scope_bit(p, len);
		if (!bit)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "scopes",
					     "unknown scope '%.*s'; known: sandboxes, keys",
					     (int)SBX_MIN(len, 32), p);
		*out |= bit;
		p += len;
	}
	return 0;
}

void sandbox_scopes_format(unsigned scopes, char out[SANDBOX_SCOPES_MAX])
{
	size_t used = 0;

	out[0] = '\0';
	for (size_t i = 0; i < SBX_ARRAY_SIZE(scope_names); i++)
		if (scopes & (1u << i))
			used += (size_t)snprintf(out + used, SANDBOX_SCOPES_MAX - used, "%s%s",
						 used ? " " : "", scope_names[i]);
}

unsigned sandbox_scopes_missing(unsigned scopes, unsigned limit)
{
	unsigned lack = scopes & ~limit & SANDBOX_SCOPES_ALL;

	return lack & -lack; /* the lowest: the first in canonical order */
}

/* The SQL edge: a stored list, read leniently (a name this build does not
 * know grants nothing, as before). */
static unsigned scopes_from_row(const char *s)
{
	unsigned bits = 0;

	for (const char *p = s; *p;) {
		size_t len;

		while (*p == ' ' || *p == ',')
			p++;
		len = strcspn(p, " ,");
		bits |= scope_bit(p, len);
		p += len;
	}
	return bits;
}

int sandbox_key_set_scopes(struct sandbox_svc *svc, const char *key_id, unsigned scopes,
			   struct sbx_error *err)
{
	char row[STORE_SCOPES_MAX];

	sandbox_scopes_format(scopes, row);
	return store_key_scopes_set(svc->store, key_id, row, err);
}

int sandbox_key_scopes(struct sandbox_svc *svc, const char *key_id, unsigned *out,
		       struct sbx_error *err)
{
	char row[STORE_SCOPES_MAX] = "";

	if (store_key_scopes_get(svc->store, key_id, row, err) < 0)
		return -1;
	*out = scopes_from_row(row);
	return 0;
}

#define KEY_PREFIX "aas_sk_"

int sandbox_authenticate_scopes(struct sandbox_svc *svc, const char *token,
				char account_id[SANDBOX_ID_MAX], unsigned *scopes,
				struct sbx_error *err)
{
	struct store_key key;
	char digest[65];
	size_t len = token ? strlen(token) : 0;

	if (len < sizeof(KEY_PREFIX) || len > 200 || strncmp(token, KEY_PREFIX, 7) != 0)
		return sbx_error_set(err, SBX_E_AUTHENTICATION, NULL,
				     "missing or invalid API key; send 'Authorization: Bearer "
				     "aas_sk_...'");
	sbx_sha256_hex(token, len, digest);
	if (store_key_find(svc->store, digest, &key, err) < 0) {
		if (err && err->code == SBX_E_AUTHENTICATION)
			sbx_error_set(err, SBX_E_AUTHENTICATION, NULL,
				      "missing or invalid API key; send 'Authorization: Bearer "
				      "aas_sk_...'");
		return -1;
	}
	snprintf(account_id, SANDBOX_ID_MAX, "%s", key.account_id);
	if (scopes)
		*scopes = scopes_from_row(key.scopes);
	return 0;
}

int sandbox_authenticate(struct sandbox_svc *svc, const char *token,
			 char account_id[SANDBOX_ID_MAX], struct sbx_error *err)
{
	return sandbox_authenticate_scopes(svc, token, account_id, NULL, err);
}

static void key_from_store(const struct store_key *k, struct sandbox_key *out)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->id, sizeof(out->id), "%s", k->id);
	snprintf(out->account_id, sizeof(out->account_id), "%s", k->account_id);
	snprintf(out->prefix, sizeof(out->prefix), "%s", k->prefix);
	out->created_at_ms = k->created_at_ms;
	out->revoked_at_ms = k->revoked_at_ms;
	out->scopes = scopes_from_row(k->scopes);
}

int sandbox_key_create(struct sandbox_svc *svc, const char *account_id, const unsigned *scopes,
		       const unsigned *creator_scopes, struct sandbox_key *key,
		       char secret[static 80], struct sbx_error *err)
{
	struct store_key k = {0};
	struct store_account acct;
	unsigned want, missing;
	char digest[65];

	/* 1. the scopes asked for, at most the creator's */
	want = scopes ? *scopes : creator_scopes ? *creator_scopes : SANDBOX_SCOPES_DEFAULT;
	missing = creator_scopes ? sandbox_scopes_missing(want, *creator_scopes) : 0;
	if (missing)
		return sbx_error_set(err, SBX_E_PERMISSION, NULL,
				     "a new key's scopes are at most its creator's, and this key "
				     "lacks the '%s' scope",
				     sandbox_scope_name(missing));
	sandbox_scopes_format(want, k.scopes);
	/* 2. the account, a fresh secret and id, stored within the caps */
	if (store_account_get(svc->store, account_id, &acct, err) < 0)
		return -1;
	if (sbx_random_id(KEY_PREFIX, 32, secret, 80) < 0 ||
	    sbx_random_id("key_", 12, k.id, sizeof(k.id)) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "no randomness available");
	snprintf(k.account_id, sizeof(k.account_id), "%s", account_id);
	snprintf(k.prefix, sizeof(k.prefix), "%.12s", secret);
	k.created_at_ms = sbx_wall_ms();
	sbx_sha256_hex(secret, strlen(secret), digest);
	struct store_key_keep keep = {
	    .max_active = svc->cfg.max_api_keys_per_account,
	    .revoked_before_ms =
		k.created_at_ms - (int64_t)svc->cfg.execution_retention_hours * 3600 * 1000,
	    .max_revoked = svc->cfg.max_api_keys_per_account,
	};
	if (store_key_insert_kept(svc->store, &k, digest, &keep, err) < 0)
		return -1;
	key_from_store(&k, key);
	return 0;
}

int sandbox_key_list(struct sandbox_svc *svc, const char *account_id, int limit,
		     const char *starting_after, struct sandbox_key **out, size_t *n,
		     bool *has_more, struct sbx_error *err)
{
	struct store_key *keys = NULL;
	size_t count = 0;

	if (store_key_list_page(svc->store, account_id, limit, starting_after, &keys, &count,
				has_more, err) < 0)
		return -1;
	*out = calloc(count ? count : 1, sizeof(**out));
	if (!*out) {
		free(keys);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	for (size_t i = 0; i < count; i++)
		key_from_store(&keys[i], &(*out)[i]);
	*n = count;
	free(keys);
	return 0;
}

int sandbox_key_revoke(struct sandbox_svc *svc, const char *account_id, const char *key_id,
		       const unsigned *caller_scopes, struct sbx_error *err)
{
	struct store_key k;
	unsigned missing;

	if (caller_scopes) {
		if (store_key_get(svc->store, account_id, key_id, &k, err) < 0)
			return -1;
		missing = sandbox_scopes_missing(scopes_from_row(k.scopes), *caller_scopes);
		if (missing)
			return sbx_error_set(err, SBX_E_PERMISSION, NULL,
					     "key '%s' has the '%s' scope, which this key lacks; "
					     "revoke it with a key that has all of its scopes",
					     k.id, sandbox_scope_name(missing));
	}
	return store_key_revoke(svc->store, account_id, key_id, err);
}
