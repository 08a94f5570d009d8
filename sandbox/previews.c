/* sandbox/previews.c: preview URLs of a sandbox's ports (docs/api.md
 * "Previews"). A preview is a random token bound to one sandbox, one port
 * and a lifetime; the store keeps the token's SHA-256, so a lookup by the
 * hash of what a browser sent finds it (no comparison of secrets here:
 * the index compares hashes). The token is never logged: the preview's
 * id is. No lock of its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../store/store.h"
#include "sandbox-priv.h"

#define MOD "sandbox"

static void preview_from_store(const struct store_preview *r, struct sandbox_preview *p)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->id, sizeof p->id, "%s", r->id);
	snprintf(p->account_id, sizeof p->account_id, "%s", r->account_id);
	snprintf(p->sandbox_id, sizeof p->sandbox_id, "%s", r->sandbox_id);
	p->port = r->port;
	p->created_at_ms = r->created_at_ms;
	p->expires_at_ms = r->expires_at_ms;
	p->revoked_at_ms = r->revoked_at_ms;
}

static int port_check(uint32_t port, struct sbx_error *err)
{
	if (port < 1 || port > 65535)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "port",
				     "port must be a number 1..65535");
	return 0;
}

int sandbox_preview_create(struct sandbox_svc *svc, const char *account_id, const char *id,
			   uint32_t port, int expires_in_s, struct sandbox_preview *out,
			   char token[static SANDBOX_PREVIEW_TOKEN_LEN + 1], struct sbx_error *err)
{
	struct store_preview row = {0};
	struct store_sandbox sb;
	char hash[65];
	int64_t now = sbx_wall_ms();

	if (port_check(port, err) < 0)
		return -1;
	if (expires_in_s < 1 || expires_in_s > svc->cfg.preview_max_ttl_seconds)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "expires_in_seconds",
				     "expires_in_seconds must be 1..%d (preview_max_ttl_seconds)",
				     svc->cfg.preview_max_ttl_seconds);
	if (sandbox_running_row(svc, account_id, id, now, &sb, err) < 0)
		return -1;
	if (sbx_random_id("", SANDBOX_PREVIEW_TOKEN_LEN / 2, token, SANDBOX_PREVIEW_TOKEN_LEN + 1) <
		0 ||
	    sbx_random_id("pv_", 12, row.id, sizeof row.id) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "no randomness available");
	sbx_sha256_hex(token, SANDBOX_PREVIEW_TOKEN_LEN, hash);
	snprintf(row.account_id, sizeof row.account_id, "%s", account_id);
	snprintf(row.sandbox_id, sizeof row.sandbox_id, "%s", id);
	row.port = port;
	row.created_at_ms = now;
	row.expires_at_ms = now + (int64_t)expires_in_s * 1000;
	if (store_preview_insert(svc->store, &row, hash, svc->cfg.max_previews_per_sandbox, err) <
	    0) {
		memset(token, 0, SANDBOX_PREVIEW_TOKEN_LEN + 1);
		return -1;
	}
	preview_from_store(&row, out);
	sbx_info(MOD, "preview %s of sandbox %s port %u created, expires in %d s", row.id, id, port,
		 expires_in_s);
	return 0;
}

int sandbox_preview_list(struct sandbox_svc *svc, const char *account_id, const char *id,
			 uint32_t port, struct sandbox_preview **out, size_t *n,
			 struct sbx_error *err)
{
	struct store_preview *rows = NULL;
	struct store_sandbox sb;
	size_t count = 0;

	*out = NULL;
	*n = 0;
	if (port && port_check(port, err) < 0)
		return -1;
	if (sandbox_visible_row(svc, account_id, id, &sb, err) < 0)
		return -1;
	if (store_preview_list(svc->store, account_id, id, port, sbx_wall_ms(),
			       (size_t)svc->cfg.max_previews_per_sandbox, &rows, &count, err) < 0)
		return -1;
	*out = calloc(count ? count : 1, sizeof(**out));
	if (!*out) {
		free(rows);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	for (size_t i = 0; i < count; i++)
		preview_from_store(&rows[i], &(*out)[i]);
	*n = count;
	free(rows);
	return 0;
}

int sandbox_preview_revoke(struct sandbox_svc *svc, const char *account_id, const char *id,
			   const char *preview_id, struct sandbox_preview *out,
			   struct sbx_error *err)
{
	struct store_preview row;
	struct store_sandbox sb;

	if (sandbox_visible_row(svc, account_id, id, &sb, err) < 0)
		return -1;
	if (store_preview_revoke(svc->store, account_id, id, preview_id, sbx_wall_ms(), &row, err) <
	    0)
		return -1;
	preview_from_store(&row, out);
	sbx_info(MOD, "preview %s of sandbox %s revoked", row.id, id);
	return 0;
}

static bool token_shape_ok(const char *t)
{
	if (strlen(t) != SANDBOX_PREVIEW_TOKEN_LEN)
		return false;
	for (; *t; t++)
		if (!((*t >= '0' && *t <= '9') || (*t >= 'a' && *t <= 'f')))
			return false;
	return true;
}

int sandbox_preview_resolve(struct sandbox_svc *svc, uint32_t port, const char *token,
			    struct sandbox_preview *out, struct sbx_error *err)
{
	struct store_preview row;
	struct sbx_error e;
	char hash[65];

	sbx_error_clear(&e);
	if (token_shape_ok(token)) {
		sbx_sha256_hex(token, SANDBOX_PREVIEW_TOKEN_LEN, hash);
		if (store_preview_find(svc->store, hash, &row, &e) < 0 &&
		    e.code != SBX_E_NOT_FOUND) {
			*err = e; /* the store failed */
			return -1;
		}
		if (e.code == SBX_OK && row.revoked_at_ms == 0 &&
		    row.expires_at_ms > sbx_wall_ms() && row.port == port) {
			preview_from_store(&row, out);
			return 0;
		}
		if (e.code == SBX_OK)
			sbx_info(MOD, "preview %s refused (%s)", row.id,
				 row.revoked_at_ms  ? "revoked"
				 : row.port != port ? "another port"
						    : "expired");
	}
	return sbx_error_set(err, SBX_E_NOT_FOUND, NULL,
			     "no such preview: the link is unknown, expired or revoked; ask the "
			     "sandbox's owner for a new one");
}
