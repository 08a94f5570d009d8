/* util/workpool.c: a bounded pool for blocking work (util.h). Threads
 * start as jobs need them, up to the pool's size, and then stay (or all at
 * creation: SBX_WORKPOOL_EAGER); jobs past the free threads wait in a FIFO
 * of bounded length. Every job accepted is called exactly once: by a
 * thread, or cancelled by sbx_workpool_stop on the stopper's thread.
 *
 * Locking: p->lock is a leaf; jobs run without it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "util.h"

struct pool_job {
	sbx_workpool_fn fn;
	void *arg;
	struct pool_job *next;
};

struct sbx_workpool {
	pthread_mutex_t lock;
	pthread_cond_t work; /* a job was queued, or the pool stops */
	pthread_cond_t idle; /* a job ended (sbx_workpool_drain waits) */
	char name[16];
	int max_threads, queue_max;
	int threads; /* started */
	int running; /* jobs being run */
	int queued;  /* jobs waiting for a thread */
	bool stopping;
	struct pool_job *head, *tail;
	pthread_t *tids; /* max_threads of them, `threads` started */
};

static void *worker_main(void *arg)
{
	struct sbx_workpool *p = arg;
	struct pool_job *j;

	/* named, so that thread counts (ps -L, tests) tell the pool's threads
	 * from the rest */
	pthread_setname_np(pthread_self(), p->name);
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->head && !p->stopping)
			pthread_cond_wait(&p->work, &p->lock);
		j = p->head;
		if (!j)
			break; /* stopping, and nothing left */
		p->head = j->next;
		if (!p->head)
			p->tail = NULL;
		p->queued--;
		p->running++;
		pthread_mutex_unlock(&p->lock);
		j->fn(j->arg, false);
		free(j);
		pthread_mutex_lock(&p->lock);
		p->running--;
		pthread_cond_broadcast(&p->idle);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* Start one more thread. Call with lock. 0 or -1. */
static int thread_add_locked(struct sbx_workpool *p)
{
	if (pthread_create(&p->tids[p->threads], NULL, worker_main, p) != 0)
		return -1;
	p->threads++;
	return 0;
}

struct sbx_workpool *sbx_workpool_new(const char *thread_name, int threads, int queue_max,
				      unsigned flags)
{
	struct sbx_workpool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->max_threads = threads > 0 ? threads : 1;
	p->tids = calloc((size_t)p->max_threads, sizeof(*p->tids));
	if (!p->tids) {
		free(p);
		return NULL;
	}
	snprintf(p->name, sizeof(p->name), "%s", thread_name);
	p->queue_max = queue_max > 0 ? queue_max : 0;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
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

int sbx_workpool_submit(struct sbx_workpool *p, sbx_workpool_fn fn, void *arg)
{
	struct pool_job *j = malloc(sizeof(*j));

	if (!j)
		return -1;
	j->fn = fn;
	j->arg = arg;
	j->next = NULL;
	pthread_mutex_lock(&p->lock);
	/* At most max_threads jobs run and queue_max more wait. */
	if (p->stopping || p->running + p->queued >= p->max_threads + p->queue_max) {
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
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

void sbx_workpool_stats(struct sbx_workpool *p, struct sbx_workpool_stats *st)
{
	pthread_mutex_lock(&p->lock);
	st->threads = p->threads;
	st->running = p->running;
	st->queued = p->queued;
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
	for (int i = 0; i < p->threads; i++)
		pthread_join(p->tids[i], NULL);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->idle);
	free(p->tids);
	free(p);
}
