/* fleet: boot slots (at most max_concurrent_boots guests boot at once;
 * customers before the pool). */
#include <time.h>

#include "fleet.h"

void fleet_slots_init(struct fleet_slots *s, int max)
{
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->max = max;
	s->active = 0;
	s->waiting = 0;
	s->stop = false;
}

void fleet_slots_destroy(struct fleet_slots *s)
{
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
}

int fleet_slot_acquire(struct fleet_slots *s, int64_t deadline_mono, struct sbx_error *err)
{
	pthread_mutex_lock(&s->lock);
	s->waiting++;
	while (s->active >= s->max) {
		struct timespec ts;

		if (sbx_mono_ms() >= deadline_mono || s->stop) {
			s->waiting--;
			pthread_mutex_unlock(&s->lock);
			sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				      "too many guests are booting on this node; retry later");
			err->retry_after_s = 5;
			return -1;
		}
		ts = sbx_timespec_in(CLOCK_REALTIME, 100);
		pthread_cond_timedwait(&s->cond, &s->lock, &ts);
	}
	s->waiting--;
	s->active++;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

bool fleet_slot_try_pool(struct fleet_slots *s)
{
	bool ok;

	pthread_mutex_lock(&s->lock);
	ok = !s->stop && s->waiting == 0 && s->active < s->max;
	if (ok)
		s->active++;
	pthread_mutex_unlock(&s->lock);
	return ok;
}

void fleet_slot_release(struct fleet_slots *s)
{
	pthread_mutex_lock(&s->lock);
	s->active--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

int fleet_slots_active(struct fleet_slots *s)
{
	int n;

	pthread_mutex_lock(&s->lock);
	n = s->active;
	pthread_mutex_unlock(&s->lock);
	return n;
}

void fleet_slots_stop(struct fleet_slots *s)
{
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}
