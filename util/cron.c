/* util/cron.c: the supervisor, one thread running periodic tasks on a base
 * tick (util.h; redis's serverCron and run_with_period are the model).
 *
 * Ticks are at a fixed rate from the start (start + k * tick), a tick
 * missed by a slow pass is skipped, not made up. A task is due when the
 * pass's time reaches task->due; running it moves due on by its period,
 * or to now + period when that is still not ahead of now (it fell a
 * whole period behind).
 *
 * Locking: c->lock (a leaf) guards n_tasks, the tasks' registration and
 * the stop flag. Only the thread running passes (the supervisor's own,
 * or a test's before start) reads and writes a task's due time and runs
 * the tasks, with no lock held. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

struct cron_task {
	const char *name;
	int64_t period_ms;
	sbx_cron_fn fn;
	void *opaque;
	bool armed;    /* seen by a pass (due is set) */
	int64_t due;   /* the monotonic ms it runs next */
	uint64_t runs; /* under c->lock (read by sbx_cron_runs) */
};

struct sbx_cron {
	pthread_mutex_t lock;
	pthread_cond_t wake; /* stop */
	char name[16];
	int64_t tick_ms;
	struct cron_task tasks[SBX_CRON_MAX_TASKS];
	int n_tasks;
	bool started, stop;
	pthread_t thread;
};

struct sbx_cron *sbx_cron_new(const char *thread_name, int64_t tick_ms)
{
	struct sbx_cron *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	snprintf(c->name, sizeof(c->name), "%s", thread_name);
	c->tick_ms = tick_ms > 0 ? tick_ms : 1;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->wake, NULL);
	return c;
}

int sbx_cron_add(struct sbx_cron *c, const char *name, int64_t period_ms, sbx_cron_fn fn,
		 void *opaque)
{
	int rc = -1;

	pthread_mutex_lock(&c->lock);
	if (period_ms >= 1 && c->n_tasks < SBX_CRON_MAX_TASKS) {
		c->tasks[c->n_tasks] = (struct cron_task){
		    .name = name, .period_ms = period_ms, .fn = fn, .opaque = opaque};
		c->n_tasks++;
		rc = 0;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int sbx_cron_pass(struct sbx_cron *c, int64_t now_mono)
{
	int n, ran = 0;

	pthread_mutex_lock(&c->lock);
	n = c->n_tasks; /* entries below n never change but for due and runs */
	pthread_mutex_unlock(&c->lock);
	for (int i = 0; i < n; i++) {
		struct cron_task *t = &c->tasks[i];

		if (!t->armed) {
			t->armed = true;
			t->due = now_mono + t->period_ms;
			continue;
		}
		if (now_mono < t->due)
			continue;
		t->due += t->period_ms;
		if (t->due <= now_mono)
			t->due = now_mono + t->period_ms;
		t->fn(t->opaque, now_mono);
		pthread_mutex_lock(&c->lock);
		t->runs++;
		pthread_mutex_unlock(&c->lock);
		ran++;
	}
	return ran;
}

uint64_t sbx_cron_runs(struct sbx_cron *c, const char *name)
{
	uint64_t runs = 0;

	pthread_mutex_lock(&c->lock);
	for (int i = 0; i < c->n_tasks; i++)
		if (strcmp(c->tasks[i].name, name) == 0)
			runs = c->tasks[i].runs;
	pthread_mutex_unlock(&c->lock);
	return runs;
}

static void *cron_main(void *arg)
{
	struct sbx_cron *c = arg;
	int64_t next = sbx_mono_ms();

	pthread_setname_np(pthread_self(), c->name);
	for (;;) {
		int64_t now = sbx_mono_ms();
		bool stop;

		sbx_cron_pass(c, now);
		next += c->tick_ms;
		now = sbx_mono_ms();
		if (next <= now) /* the pass took a tick or more: skip, no burst */
			next = now + c->tick_ms;
		pthread_mutex_lock(&c->lock);
		while (!c->stop && now < next) {
			struct timespec ts = sbx_timespec_in(CLOCK_REALTIME, next - now);

			pthread_cond_timedwait(&c->wake, &c->lock, &ts);
			now = sbx_mono_ms();
		}
		stop = c->stop;
		pthread_mutex_unlock(&c->lock);
		if (stop)
			break;
	}
	return NULL;
}

int sbx_cron_start(struct sbx_cron *c)
{
	if (pthread_create(&c->thread, NULL, cron_main, c) != 0)
		return -1;
	c->started = true;
	return 0;
}

void sbx_cron_stop(struct sbx_cron *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_cond_broadcast(&c->wake);
	pthread_mutex_unlock(&c->lock);
	if (c->started) {
		pthread_join(c->thread, NULL);
		c->started = false;
	}
}

void sbx_cron_free(struct sbx_cron *c)
{
	if (!c)
		return;
	sbx_cron_stop(c);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->wake);
	free(c);
}
