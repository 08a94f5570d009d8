/* accounts: create an account (with its first key), add credit, list.
 * See sandbox.h. */
#include "sandbox.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../billing/billing.h"
#include "../store/store.h"
#include "sandbox-priv.h"

static int account_view(struct sandbox_svc *svc, const struct store_account *a,
			struct sandbox_account *out, struct sbx_error *err)
{
	struct store_balance bal;

	if (billing_balance(svc->store, a->id, sbx_wall_ms(), &bal, err) < 0)
		return -1;
	memset(out, 0, sizeof(*out));
	snprintf(out->id, sizeof(out->id), "%s", a->id);
	snprintf(out->name, sizeof(out->name), "%s", a->name);
	out->created_at_ms = a->created_at_ms;
	out->balance_micro = bal.balance_micro;
	out->available_micro = bal.available_micro;
	return 0;
}

int sandbox_account_create(struct sandbox_svc *svc, const char *name, int64_t credit_micro,
			   struct sandbox_account *acct, struct sandbox_key *key,
			   char secret[static 80], struct sbx_error *err)
{
	struct store_account a;

	if (!name || !name[0] || strlen(name) >= sizeof(a.name))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "name",
				     "name must be 1..127 characters");
	if (credit_micro < 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "credit_usd",
				     "credit must not be negative");
	if (store_account_create(svc->store, name, credit_micro, &a, err) < 0)
		return -1;
	if (sandbox_key_create(svc, a.id, NULL, NULL, key, secret, err) < 0)
		return -1;
	return account_view(svc, &a, acct, err);
}

int sandbox_account_add_credit(struct sandbox_svc *svc, const char *account_id,
			       int64_t amount_micro, struct sandbox_account *acct,
			       struct sbx_error *err)
{
	struct store_account a;

	if (store_credit_add(svc->store, account_id, amount_micro, err) < 0)
		return -1;
	if (store_account_get(svc->store, account_id, &a, err) < 0)
		return -1;
	return account_view(svc, &a, acct, err);
}

int sandbox_account_list(struct sandbox_svc *svc, struct sandbox_account **out, size_t *n,
			 struct sbx_error *err)
{
	struct store_account *accts = NULL;
	size_t count = 0;

	if (store_account_list(svc->store, &accts, &count, err) < 0)
		return -1;
	*out = calloc(count ? count : 1, sizeof(**out));
	if (!*out) {
		free(accts);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	}
	for (size_t i = 0; i < count; i++) {
		if (account_view(svc, &accts[i], &(*out)[i], err) < 0) {
			free(accts);
			free(*out);
			*out = NULL;
			return -1;
		}
	}
	*n = count;
	free(accts);
	return 0;
}
