/* api/inflight.c: per-account counts of long requests in flight (creates,
 * DELETEs, executions, execs), each against its cap (api-priv.h). An
 * account has an entry only while it has something in flight, so the table
 * holds at most as many entries as there are requests in flight.
 *
 * Locking: t->lock is a leaf (it may be taken with srv->lock held). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api-priv.h"

#define BUCKETS 251

struct entry {
	char account_id[SANDBOX_ID_MAX];
	int n[API_INFLIGHT_KINDS];
	struct entry *next;
};

struct api_inflight {
	pthread_mutex_t lock;
	struct entry *bucket[BUCKETS];
};

static size_t hash(const char *s)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h % BUCKETS;
}

/* Where the account's entry is (or would be linked). t->lock held. */
static struct entry **find_locked(struct api_inflight *t, const char *account_id)
{
	struct entry **pe = &t->bucket[hash(account_id)];

	while (*pe && strcmp((*pe)->account_id, account_id) != 0)
		pe = &(*pe)->next;
	return pe;
}

struct api_inflight *api_inflight_new(void)
{
	struct api_inflight *t = calloc(1, sizeof(*t));

	if (t)
		pthread_mutex_init(&t->lock, NULL);
	return t;
}

void api_inflight_free(struct api_inflight *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < BUCKETS; i++) {
		while (t->bucket[i]) {
			struct entry *e = t->bucket[i];

			t->bucket[i] = e->next;
			free(e);
		}
	}
	pthread_mutex_destroy(&t->lock);
	free(t);
}

bool api_inflight_take(struct api_inflight *t, const char *account_id, enum api_inflight_kind kind,
		       int cap)
{
	struct entry **pe, *e;
	bool taken = false;

	if (strlen(account_id) >= SANDBOX_ID_MAX)
		return false;
	pthread_mutex_lock(&t->lock);
	pe = find_locked(t, account_id);
	e = *pe;
	if (!e && cap > 0 && (e = calloc(1, sizeof(*e))) != NULL) {
		memcpy(e->account_id, account_id, strlen(account_id) + 1);
		*pe = e;
	}
	if (e && e->n[kind] < cap) {
		e->n[kind]++;
		taken = true;
	}
	pthread_mutex_unlock(&t->lock);
	return taken;
}

void api_inflight_put(struct api_inflight *t, const char *account_id, enum api_inflight_kind kind)
{
	struct entry **pe, *e;
	bool empty = true;

	pthread_mutex_lock(&t->lock);
	pe = find_locked(t, account_id);
	e = *pe;
	if (e && e->n[kind] > 0) {
		e->n[kind]--;
		for (int k = 0; k < API_INFLIGHT_KINDS; k++)
			empty = empty && e->n[k] == 0;
		if (empty) {
			*pe = e->next;
			free(e);
		}
	}
	pthread_mutex_unlock(&t->lock);
}

int api_inflight_count(struct api_inflight *t, const char *account_id, enum api_inflight_kind kind)
{
	struct entry *e;
	int n;

	pthread_mutex_lock(&t->lock);
	e = *find_locked(t, account_id);
	n = e ? e->n[kind] : 0;
	pthread_mutex_unlock(&t->lock);
	return n;
}
