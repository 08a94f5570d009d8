/* api/workpool.c: the bounded pool that runs long requests (create, DELETE,
 * executions) while their connections are parked (api-priv.h). Threads
 * start as jobs need them, up to the pool's size, and then stay; jobs past
 * the free threads wait in a FIFO of bounded length.
 *
 * Locking: p->lock is a leaf; jobs run without it. */
#include <pthread.h>
#include <stdlib.h>

#include "api-priv.h"

#define MOD "api"

struct pool_job {
	api_workpool_fn fn;
	void *arg;
	struct pool_job *next;
};

struct api_workpool {
	pthread_mutex_t lock;
	pthread_cond_t work; /* a job was queued, or the pool stops */
	int max_threads, queue_max;
	int threads; /* started */
	int idle;    /* started and waiting for a job */
	int running; /* jobs being run */
	int queued;  /* jobs waiting for a thread */
	bool stopping;
	struct pool_job *head, *tail;
	pthread_t *tids; /* max_threads of them, `threads` started */
};

static void *worker_main(void *arg)
{
	struct api_workpool *p = arg;
	struct pool_job *j;

	/* named, so that thread counts (ps -L, tests) can tell the pool's
	 * threads, started on demand up to max_threads, from the rest */
	pthread_setname_np(pthread_self(), API_WORKPOOL_THREAD_NAME);
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->head && !p->stopping) {
			p->idle++;
			pthread_cond_wait(&p->work, &p->lock);
			p->idle--;
		}
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
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

struct api_workpool *api_workpool_new(int threads, int queue_max)
{
	struct api_workpool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->tids = calloc((size_t)(threads > 0 ? threads : 1), sizeof(*p->tids));
	if (!p->tids) {
		free(p);
		return NULL;
	}
	p->max_threads = threads > 0 ? threads : 1;
	p->queue_max = queue_max > 0 ? queue_max : 0;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
	return p;
}

int api_workpool_submit(struct api_workpool *p, api_workpool_fn fn, void *arg)
{
	struct pool_job *j = malloc(sizeof(*j));
	int free_threads;

	if (!j)
		return -1;
	j->fn = fn;
	j->arg = arg;
	j->next = NULL;
	pthread_mutex_lock(&p->lock);
	/* Jobs that would find no thread (idle or still to start) may wait,
	 * up to queue_max of them. */
	free_threads = p->idle + (p->max_threads - p->threads);
	if (p->stopping || p->queued >= free_threads + p->queue_max) {
		pthread_mutex_unlock(&p->lock);
		free(j);
		return -1;
	}
	if (p->queued >= p->idle && p->threads < p->max_threads) {
		if (pthread_create(&p->tids[p->threads], NULL, worker_main, p) == 0)
			p->threads++;
		else if (p->threads == 0) {
			pthread_mutex_unlock(&p->lock);
			free(j);
			return -1; /* no thread would ever run it */
		}
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

void api_workpool_stats(struct api_workpool *p, struct api_workpool_stats *st)
{
	pthread_mutex_lock(&p->lock);
	st->threads = p->threads;
	st->running = p->running;
	st->queued = p->queued;
	pthread_mutex_unlock(&p->lock);
}

void api_workpool_stop(struct api_workpool *p)
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
	pthread_mutex_unlock(&p->lock);
	while (j) {
		struct pool_job *next = j->next;

		j->fn(j->arg, true);
		free(j);
		j = next;
	}
}

void api_workpool_free(struct api_workpool *p)
{
	if (!p)
		return;
	api_workpool_stop(p);
	for (int i = 0; i < p->threads; i++)
		pthread_join(p->tids[i], NULL);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->work);
	free(p->tids);
	free(p);
}
