/* fleet: a guest's ring of metrics samples (fleet.h "metrics"), and the
 * CPU figure made from two readings. No lock of its own: its guest's
 * (metrics.c adds to it under the guest's lock; guest.c frees it with
 * the guest). */
#include <stdlib.h>
#include <string.h>

#include "fleet-priv.h"

struct fleet_metrics {
	size_t cap, head, count; /* head: where the next sample goes */
	bool has_base;		 /* the previous reading with CPU time: */
	int64_t base_mono_ms;
	uint64_t base_cpu_ns;
	struct fleet_metrics_sample s[];
};

struct fleet_metrics *fleet_metrics_new(size_t cap)
{
	struct fleet_metrics *m;

	if (cap < 1 || cap > FLEET_METRICS_HISTORY)
		return NULL;
	m = calloc(1, sizeof(*m) + cap * sizeof(m->s[0]));
	if (m)
		m->cap = cap;
	return m;
}

void fleet_metrics_free(struct fleet_metrics *m)
{
	free(m);
}

bool fleet_metrics_add(struct fleet_metrics *m, const struct fleet_metrics_reading *r)
{
	bool had = m->has_base;
	int64_t dt = r->mono_ms - m->base_mono_ms;
	uint64_t base = m->base_cpu_ns;
	struct fleet_metrics_sample *s;

	if (!r->has_cpu)
		return false; /* nothing to measure against: the base stays */
	m->has_base = true;
	m->base_mono_ms = r->mono_ms;
	m->base_cpu_ns = r->cpu_ns;
	/* a CPU time that went back is another domain (or libvirt's
	 * confusion): start over from this reading */
	if (!had || dt <= 0 || r->cpu_ns < base)
		return false;
	s = &m->s[m->head];
	s->at_ms = r->wall_ms;
	s->cpu_cores = (double)(r->cpu_ns - base) / ((double)dt * 1e6);
	s->memory_used_mib = r->memory_used_mib;
	s->disk_used_mib = r->disk_used_mib;
	m->head = (m->head + 1) % m->cap;
	if (m->count < m->cap)
		m->count++;
	return true;
}

size_t fleet_metrics_copy(const struct fleet_metrics *m, struct fleet_metrics_sample *out,
			  size_t max)
{
	size_t n = m->count < max ? m->count : max;
	/* the newest n: they start n before head */
	size_t first = (m->head + m->cap - n) % m->cap;

	for (size_t i = 0; i < n; i++)
		out[i] = m->s[(first + i) % m->cap];
	return n;
}
