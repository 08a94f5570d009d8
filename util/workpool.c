/* util/workpool.c: a bounded pool for blocking work (util.h). Threads
 * start as jobs need them, up to the pool's size, and end after idle_ms
 * without a job (or all start at creation and stay: SBX_WORKPOOL_EAGER);
 * jobs past the free threads wait in a FIFO of bounded length. Every job
 * accepted is called exactly once: by a thread, or cancelled by
 * sbx_workpool_stop on the stopper's thread.
 *
 * A thread that ends is joined by the next thread that ends, the last one
 * by sbx_workpool_free: no thread is left unjoined, none is joined with
 * the lock held.
 *
 * Queue once: a job submitted with a key is on p->keyed from submit until
 * its fn returned (run or cancelled); a submit_once whose key is on that
 * list is answered 1. The list holds only jobs the pool holds anyway, so
 * it is bounded by max_threads + queue_max.
 *
 * Locking: p->lock is a leaf; jobs run without it. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "util.h"

struct pool_job {
	sbx_workpool_fn fn;
	void *arg;
	const void *key;	/* NULL: sbx_workpool_submit */
	struct pool_job *next;	/* the queue */
	struct pool_job *knext; /* p->keyed, when key */
	struct pool_job **kprev;
};

struct sbx_workpool {
	pthread_mutex_t lock;
	pthread_cond_t work; /* a job was queued, or the pool stops (CLOCK_MONOTONIC) */
	pthread_cond_t idle; /* a job or a thread ended (drain and free wait) */
	char name[16];
	unsigned flags;
	int max_threads, queue_max;
	int64_t idle_ms; /* a non-eager thread ends after this long without a job */
	int threads;	 /* running, or waiting for a job */
	int running;	 /* jobs being run */
	int queued;	 /* jobs waiting for a thread */
	bool stopping;
	struct pool_job *head, *tail;
	struct pool_job *keyed; /* jobs with a key, queued or running */
	int n_keyed;
	bool has_ended;
	pthread_t ended; /* the last thread that ended, to join */
};

/* A job with this key is queued, running or being cancelled. Call with
 * lock. */
static bool key_busy_locked(struct sbx_workpool *p, const void *key)
{
	for (struct pool_job *j = p->keyed; j; j = j->knext)
		if (j->key == key)
			return true;
	return false;
}

/* fn returned: the job's key is free again. Call with lock. */
static void key_release_locked(struct sbx_workpool *p, struct pool_job *j)
{
	if (!j->key)
		return;
	*j->kprev = j->knext;
	if (j->knext)
		j->knext->kprev = j->kprev;
	p->n_keyed--;
}

/* The next job for a thread, or NULL when the thread should end: the pool
 * stops and nothing waits, or (not eager) nothing came for idle_ms. Call
 * with lock. */
static struct pool_job *job_next_locked(struct sbx_workpool *p)
{
	int64_t idle_since = sbx_mono_ms();
	struct pool_job *j;

	while (!p->head && !p->stopping) {
		if (p->flags & SBX_WORKPOOL_EAGER) {
			pthread_cond_wait(&p->work, &p->lock);
			continue;
		}
		/* idle_ms is read again each time: set_idle_ms wakes us */
		struct timespec ts =
		    sbx_timespec_in(CLOCK_MONOTONIC, idle_since + p->idle_ms - sbx_mono_ms());

		if (pthread_cond_timedwait(&p->work, &p->lock, &ts) == ETIMEDOUT && !p->head)
			return NULL;
	}
	j = p->head;
	if (!j)
		return NULL; /* stopping, and nothing left */
	p->head = j->next;
	if (!p->head)
		p->tail = NULL;
	p->queued--;
	return j;
}

static void *worker_main(void *arg)
{
	struct sbx_workpool *p = arg;
	struct pool_job *j;
	pthread_t prev;
	bool join_prev;

	/* named, so that thread counts (ps -L, tests) tell the pool's threads
	 * from the rest */
	pthread_setname_np(pthread_self(), p->name);

	pthread_mutex_lock(&p->lock);
	while ((j = job_next_locked(p))) {
		p->running++;
		pthread_mutex_unlock(&p->lock);
		j->fn(j->arg, false);
		pthread_mutex_lock(&p->lock);
		key_release_locked(p, j);
		free(j);
		p->running--;
		pthread_cond_broadcast(&p->idle);
	}
	/* End: the next thread to end (or free) joins this one, this one
	 * joins the one before. A submit from now on counts one thread less
	 * and starts another if it needs one. */
	p->threads--;
	prev = p->ended;
	join_prev = p->has_ended;
	p->ended = pthread_self();
	p->has_ended = true;
	pthread_cond_broadcast(&p->idle);
	pthread_mutex_unlock(&p->lock);
	if (join_prev)
		pthread_join(prev, NULL); /* it ended: returns at once */
	return NULL;
}

/* Start one more thread. Call with lock. 0 or -1. */
static int thread_add_locked(struct sbx_workpool *p)
{
	pthread_t t;

	if (pthread_create(&t, NULL, worker_main, p) != 0)
		return -1;
	p->threads++;
	return 0;
}

struct sbx_workpool *sbx_workpool_new(const char *thread_name, int threads, int queue_max,
				      unsigned flags)
{
	struct sbx_workpool *p = calloc(1, sizeof(*p));
	pthread_condattr_t mono;

	if (!p)
		return NULL;
	p->max_threads = threads > 0 ? threads : 1;
	snprintf(p->name, sizeof(p->name), "%s", thread_name);
	p->flags = flags;
	p->queue_max = queue_max > 0 ? queue_max : 0;
	p->idle_ms = SBX_WORKPOOL_IDLE_MS;
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&mono);
	pthread_condattr_setclock(&mono, CLOCK_MONOTONIC);
	pthread_cond_init(&p->work, &mono);
	pthread_condattr_destroy(&mono);
	pthread_cond_init(&p->idle, NULL);
	if (flags & SBX_WORKPOOL_EAGER) {
		pthread_mutex_lock(&p->lock);
		while (p->threads < p->max_threads && thread_add_locked(p) == 0)
			;
		pthread_mutex_unlock(&p->lock);
		if (p->threads < p->max_threads) {
			sbx_workpool_free(p);
			return NULL;
		}
	}
	return p;
}

/* Queue fn(arg) holding key (NULL: none). 0, 1 (key busy) or -1. */
static int job_submit(struct sbx_workpool *p, const void *key, sbx_workpool_fn fn, void *arg)
{
	struct pool_job *j = malloc(sizeof(*j));

	if (!j)
		return -1;
	j->fn = fn;
	j->arg = arg;
	j->key = key;
	j->next = NULL;
	pthread_mutex_lock(&p->lock);
	if (p->stopping) {
		pthread_mutex_unlock(&p->lock);
		free(j);
		return -1;
	}
	/* A job with this key is queued or running: it does the work. */
	if (key && key_busy_locked(p, key)) {
		pthread_mutex_unlock(&p->lock);
		free(j);
		return 1;
	}
	/* At most max_threads jobs run and queue_max more wait. */
	if (p->running + p->queued >= p->max_threads + p->queue_max) {
		pthread_mutex_unlock(&p->lock);
		free(j);
		return -1;
	}
	/* Every thread started has a job: start one more if it may. */
	if (p->running + p->queued >= p->threads && p->threads < p->max_threads &&
	    thread_add_locked(p) < 0 && p->threads == 0) {
		pthread_mutex_unlock(&p->lock);
		free(j);
		return -1; /* no thread would ever run it */
	}
	if (p->tail)
		p->tail->next = j;
	else
		p->head = j;
	p->tail = j;
	p->queued++;
	if (key) {
		j->knext = p->keyed;
		if (p->keyed)
			p->keyed->kprev = &j->knext;
		j->kprev = &p->keyed;
		p->keyed = j;
		p->n_keyed++;
	}
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int sbx_workpool_submit(struct sbx_workpool *p, sbx_workpool_fn fn, void *arg)
{
	return job_submit(p, NULL, fn, arg);
}

int sbx_workpool_submit_once(struct sbx_workpool *p, const void *key, sbx_workpool_fn fn, void *arg)
{
	return key ? job_submit(p, key, fn, arg) : -1;
}

void sbx_workpool_set_idle_ms(struct sbx_workpool *p, int64_t idle_ms)
{
	pthread_mutex_lock(&p->lock);
	p->idle_ms = idle_ms > 0 ? idle_ms : 1;
	pthread_cond_broadcast(&p->work); /* idle threads: count from the new value */
	pthread_mutex_unlock(&p->lock);
}

void sbx_workpool_stats(struct sbx_workpool *p, struct sbx_workpool_stats *st)
{
	pthread_mutex_lock(&p->lock);
	st->threads = p->threads;
	st->running = p->running;
	st->queued = p->queued;
	st->keyed = p->n_keyed;
	pthread_mutex_unlock(&p->lock);
}

void sbx_workpool_stop(struct sbx_workpool *p)
{
	struct pool_job *j;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	j = p->head;
	p->head = p->tail = NULL;
	p->queued = 0;
	pthread_cond_broadcast(&p->work);
	pthread_cond_broadcast(&p->idle);
	pthread_mutex_unlock(&p->lock);
	while (j) {
		struct pool_job *next = j->next;

		j->fn(j->arg, true);
		if (j->key) {
			pthread_mutex_lock(&p->lock);
			key_release_locked(p, j);
			pthread_mutex_unlock(&p->lock);
		}
		free(j);
		j = next;
	}
}

void sbx_workpool_drain(struct sbx_workpool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_cond_broadcast(&p->work);
	/* queued jobs always have a thread: submit starts one or refuses */
	while (p->queued > 0 || p->running > 0)
		pthread_cond_wait(&p->idle, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

void sbx_workpool_free(struct sbx_workpool *p)
{
	if (!p)
		return;
	sbx_workpool_stop(p);
	pthread_mutex_lock(&p->lock);
	while (p->threads > 0)
		pthread_cond_wait(&p->idle, &p->lock);
	pthread_mutex_unlock(&p->lock);
	/* every thread but the last to end was joined by the next one */
	if (p->has_ended)
		pthread_join(p->ended, NULL);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->idle);
	free(p);
}
