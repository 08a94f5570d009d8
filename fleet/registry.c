/* fleet: the registry of live guests by sandbox id (a chained hash table
 * of nodes embedded in the guests). */
#include <stdlib.h>
#include <string.h>

#include "fleet.h"

#define REGISTRY_MIN_BUCKETS 64

/* FNV-1a: ids are random, any spread will do. */
static size_t hash(const char *key)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *key; key++) {
		h ^= (unsigned char)*key;
		h *= 1099511628211ULL;
	}
	return (size_t)h;
}

int fleet_registry_init(struct fleet_registry *r)
{
	r->buckets = calloc(REGISTRY_MIN_BUCKETS, sizeof(*r->buckets));
	r->n_buckets = r->buckets ? REGISTRY_MIN_BUCKETS : 0;
	r->count = 0;
	return r->buckets ? 0 : -1;
}

void fleet_registry_free(struct fleet_registry *r)
{
	free(r->buckets);
	r->buckets = NULL;
	r->n_buckets = r->count = 0;
}

/* Double the table (load over 1); kept as it is when out of memory. */
static void grow(struct fleet_registry *r)
{
	size_t n = r->n_buckets ? r->n_buckets * 2 : REGISTRY_MIN_BUCKETS;
	struct fleet_node **b = calloc(n, sizeof(*b));

	if (!b)
		return;
	for (size_t i = 0; i < r->n_buckets; i++) {
		struct fleet_node *node = r->buckets[i];

		while (node) {
			struct fleet_node *next = node->next;
			size_t k = hash(node->key) & (n - 1);

			node->next = b[k];
			b[k] = node;
			node = next;
		}
	}
	free(r->buckets);
	r->buckets = b;
	r->n_buckets = n;
}

void fleet_registry_put(struct fleet_registry *r, struct fleet_node *n)
{
	size_t k;

	if (r->count >= r->n_buckets)
		grow(r);
	k = hash(n->key) & (r->n_buckets - 1);
	n->next = r->buckets[k];
	r->buckets[k] = n;
	r->count++;
}

struct fleet_node *fleet_registry_get(const struct fleet_registry *r, const char *key)
{
	if (!r->n_buckets)
		return NULL;
	for (struct fleet_node *n = r->buckets[hash(key) & (r->n_buckets - 1)]; n; n = n->next)
		if (strcmp(n->key, key) == 0)
			return n;
	return NULL;
}

struct fleet_node *fleet_registry_del(struct fleet_registry *r, const char *key)
{
	struct fleet_node **pp;

	if (!r->n_buckets)
		return NULL;
	for (pp = &r->buckets[hash(key) & (r->n_buckets - 1)]; *pp; pp = &(*pp)->next) {
		struct fleet_node *n = *pp;

		if (strcmp(n->key, key) == 0) {
			*pp = n->next;
			n->next = NULL;
			r->count--;
			return n;
		}
	}
	return NULL;
}
