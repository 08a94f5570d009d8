/* sandbox/budget.c: the output budget (sandbox.h "output budget"): bytes
 * of replies waiting to be sent, per account and for the host.
 *
 * One object, one lock (b->lock), a leaf: taken with or without any other
 * lock held, nothing is called under it. It guards the totals, the
 * accounts' entries and the fields of every hold charged to it. An
 * account has an entry only while it holds something: the entry is
 * made by its first charge and freed when its bytes drop to 0. A hold
 * that holds bytes points at its account's entry, so a grow, a shrink and
 * a release find it without a lookup; only a first charge looks it up
 * (a hash of the account id).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox-priv.h"

#define BUDGET_BUCKETS 256 /* a power of two */

struct output_account {
	struct output_account *next; /* in its bucket */
	char id[SANDBOX_ID_MAX];
	uint64_t held;
};

struct sandbox_output_budget {
	pthread_mutex_t lock;
	uint64_t account_max, host_max; /* bytes; constant */
	uint64_t held;			/* by the host */
	size_t n_accounts;		/* entries (accounts holding any) */
	struct output_account *buckets[BUDGET_BUCKETS];
};

struct sandbox_output_budget *sandbox_output_budget_new(uint64_t account_max, uint64_t host_max)
{
	struct sandbox_output_budget *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	pthread_mutex_init(&b->lock, NULL);
	b->account_max = account_max;
	b->host_max = host_max;
	return b;
}

void sandbox_output_budget_free(struct sandbox_output_budget *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < BUDGET_BUCKETS; i++)
		while (b->buckets[i]) {
			struct output_account *a = b->buckets[i];

			b->buckets[i] = a->next;
			free(a);
		}
	pthread_mutex_destroy(&b->lock);
	free(b);
}

/* FNV-1a of the account id: its bucket's head. */
static struct output_account **bucket(struct sandbox_output_budget *b, const char *id)
{
	uint32_t h = 2166136261u;

	for (const unsigned char *p = (const unsigned char *)id; *p; p++)
		h = (h ^ *p) * 16777619u;
	return &b->buckets[h & (BUDGET_BUCKETS - 1)];
}

/* The link to the entry of `id` in its bucket (*result NULL: none). */
static struct output_account **account_find_locked(struct sandbox_output_budget *b, const char *id)
{
	struct output_account **pp;

	for (pp = bucket(b, id); *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->id, id) == 0)
			break;
	return pp;
}

/* Take `bytes` off a's entry and the host's; the entry goes at 0. */
static void account_put_locked(struct sandbox_output_budget *b, struct output_account *a,
			       uint64_t bytes)
{
	b->held -= SBX_MIN(b->held, bytes);
	a->held -= SBX_MIN(a->held, bytes);
	if (a->held == 0) {
		struct output_account **pp = account_find_locked(b, a->id);

		*pp = a->next;
		b->n_accounts--;
		free(a);
	}
}

void sandbox_output_hold_init(struct sandbox_output_hold *hold, struct sandbox_output_budget *b,
			      const char *account_id)
{
	memset(hold, 0, sizeof(*hold));
	hold->budget = b;
	snprintf(hold->account_id, sizeof(hold->account_id), "%s", account_id);
}

/* The refusal of a charge, in the caller's words (sandbox.h). */
static int refuse(const struct sandbox_output_budget *b, enum sbx_code code,
		  const struct sandbox_output_words *words, struct sbx_error *err)
{
	const char *w, *mib;

	if (!err)
		return -1;
	if (code == SBX_E_INTERNAL)
		sbx_error_set(err, code, NULL, "out of memory");
	else if (!words)
		sbx_error_set(err, code, NULL, "the output budget is spent");
	else if (code == SBX_E_SERVICE_UNAVAILABLE)
		sbx_error_set(err, code, NULL, "%s", words->host);
	else if ((mib = strstr((w = words->account), "%llu")))
		sbx_error_set(err, code, NULL, "%.*s%llu%s", (int)(mib - w), w,
			      (unsigned long long)(b->account_max >> 20), mib + 4);
	else
		sbx_error_set(err, code, NULL, "%s", w);
	err->retry_after_s = 1;
	return -1;
}

int sandbox_output_charge(struct sandbox_output_hold *hold, uint64_t bytes,
			  enum sandbox_output_how how, const struct sandbox_output_words *words,
			  struct sbx_error *err)
{
	struct sandbox_output_budget *b = hold ? hold->budget : NULL;
	struct output_account **pp = NULL, *a;
	enum sbx_code code = SBX_OK;

	if (!b || !hold->account_id[0])
		return -1;
	if (bytes == 0)
		return 0;
	pthread_mutex_lock(&b->lock);
	a = hold->account;
	if (!a) { /* a first charge: its account may hold already */
		pp = account_find_locked(b, hold->account_id);
		a = *pp;
	}
	if (how == SANDBOX_OUTPUT_WITHIN && (a ? a->held : 0) + bytes > b->account_max)
		code = SBX_E_RATE_LIMITED;
	else if (how == SANDBOX_OUTPUT_WITHIN && b->held + bytes > b->host_max)
		code = SBX_E_SERVICE_UNAVAILABLE;
	else if (!a && !(a = calloc(1, sizeof(*a))))
		code = SBX_E_INTERNAL;
	if (code == SBX_OK) {
		if (pp && !*pp) { /* the account's new entry */
			snprintf(a->id, sizeof(a->id), "%s", hold->account_id);
			*pp = a;
			b->n_accounts++;
		}
		if (!hold->account) {
			hold->account = a;
			hold->floor = bytes;
		}
		a->held += bytes;
		b->held += bytes;
		hold->bytes += bytes;
	}
	pthread_mutex_unlock(&b->lock);
	return code == SBX_OK ? 0 : refuse(b, code, words, err);
}

void sandbox_output_shrink(struct sandbox_output_hold *hold, uint64_t bytes)
{
	struct sandbox_output_budget *b = hold ? hold->budget : NULL;

	if (!b)
		return;
	pthread_mutex_lock(&b->lock);
	/* never below the floor: release gives that back */
	bytes = SBX_MIN(bytes, hold->bytes > hold->floor ? hold->bytes - hold->floor : 0);
	if (hold->account && bytes > 0) {
		account_put_locked(b, hold->account, bytes);
		hold->bytes -= bytes;
	}
	pthread_mutex_unlock(&b->lock);
}

void sandbox_output_release(struct sandbox_output_hold *hold)
{
	struct sandbox_output_budget *b = hold ? hold->budget : NULL;

	if (!b)
		return;
	pthread_mutex_lock(&b->lock);
	if (hold->account)
		account_put_locked(b, hold->account, hold->bytes);
	hold->account = NULL;
	hold->bytes = hold->floor = 0;
	pthread_mutex_unlock(&b->lock);
}

size_t sandbox_output_held(struct sandbox_output_budget *b, const char *account_id, uint64_t *host,
			   uint64_t *account)
{
	struct output_account *a;
	size_t n;

	pthread_mutex_lock(&b->lock);
	a = account_id ? *account_find_locked(b, account_id) : NULL;
	*host = b->held;
	if (account)
		*account = a ? a->held : 0;
	n = b->n_accounts;
	pthread_mutex_unlock(&b->lock);
	return n;
}
