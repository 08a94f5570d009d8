/* util/cron.c and util/workpool.c: the supervisor's period semantics, its
 * thread's start and stop; the blocking pool's bound, stop (cancel) and
 * drain, and that every job accepted is called exactly once; that threads
 * of a pool that is not eager start on demand and end when idle; that
 * submit_once queues at most one job per key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/util.h"

/* ------------------------------------------------------------ supervisor */

struct counted {
	pthread_mutex_t lock;
	int runs;
	int64_t last_now;
};

static void count_task(void *opaque, int64_t now_mono)
{
	struct counted *c = opaque;

	pthread_mutex_lock(&c->lock);
	c->runs++;
	c->last_now = now_mono;
	pthread_mutex_unlock(&c->lock);
}

static int runs_of(struct counted *c)
{
	int n;

	pthread_mutex_lock(&c->lock);
	n = c->runs;
	pthread_mutex_unlock(&c->lock);
	return n;
}

#define COUNTED                                                                                    \
	{                                                                                          \
		PTHREAD_MUTEX_INITIALIZER, 0, 0                                                    \
	}

/* A task runs one period after the pass that armed it, then once a period;
 * a period under the tick means every pass; passes with made-up times. */
static void cron_runs_with_period(void **state)
{
	struct sbx_cron *c = sbx_cron_new("t-cron", 100);
	struct counted every = COUNTED, slow = COUNTED, fast = COUNTED;

	(void)state;
	assert_non_null(c);
	assert_int_equal(sbx_cron_add(c, "every", 100, count_task, &every), 0);
	assert_int_equal(sbx_cron_add(c, "slow", 1000, count_task, &slow), 0);
	assert_int_equal(sbx_cron_add(c, "fast", 10, count_task, &fast), 0);
	assert_int_equal(sbx_cron_pass(c, 0), 0);   /* arms them */
	assert_int_equal(sbx_cron_pass(c, 50), 1);  /* fast only */
	assert_int_equal(sbx_cron_pass(c, 100), 2); /* every, fast */
	assert_int_equal(every.last_now, 100);
	assert_int_equal(sbx_cron_pass(c, 150), 1); /* fast only */
	for (int64_t t = 200; t <= 1000; t += 100)
		sbx_cron_pass(c, t);
	assert_int_equal(every.runs, 10);
	assert_int_equal(slow.runs, 1);
	assert_int_equal(slow.last_now, 1000);
	assert_int_equal(fast.runs, 12); /* every pass */
	assert_int_equal(sbx_cron_runs(c, "every"), 10);
	assert_int_equal(sbx_cron_runs(c, "slow"), 1);
	assert_int_equal(sbx_cron_runs(c, "nobody"), 0);
	sbx_cron_free(c);
}

/* A tick that comes late does not push the schedule back; a pass that
 * comes periods late runs a task once, not once per missed period. */
static void cron_keeps_schedule_without_bursts(void **state)
{
	struct sbx_cron *c = sbx_cron_new("t-cron", 100);
	struct counted every = COUNTED, slow = COUNTED;

	(void)state;
	sbx_cron_add(c, "every", 100, count_task, &every);
	sbx_cron_add(c, "slow", 1000, count_task, &slow);
	sbx_cron_pass(c, 0);
	assert_int_equal(sbx_cron_pass(c, 130), 1); /* late by 30 */
	assert_int_equal(sbx_cron_pass(c, 200), 1); /* still due at 200 */
	assert_int_equal(every.runs, 2);
	/* 4.8 s without a pass (a slow task): one run each, no catch-up */
	assert_int_equal(sbx_cron_pass(c, 5000), 2);
	assert_int_equal(sbx_cron_pass(c, 5000), 0);
	assert_int_equal(sbx_cron_pass(c, 5050), 0);
	assert_int_equal(sbx_cron_pass(c, 5100), 1); /* every: period from 5000 */
	assert_int_equal(sbx_cron_pass(c, 6000), 2);
	assert_int_equal(every.runs, 5);
	assert_int_equal(slow.runs, 2);
	sbx_cron_free(c);
}

static void cron_refuses_bad_tasks(void **state)
{
	struct sbx_cron *c = sbx_cron_new("t-cron", 100);
	struct counted x = COUNTED;

	(void)state;
	assert_int_equal(sbx_cron_add(c, "zero", 0, count_task, &x), -1);
	for (int i = 0; i < SBX_CRON_MAX_TASKS; i++)
		assert_int_equal(sbx_cron_add(c, "t", 1000, count_task, &x), 0);
	assert_int_equal(sbx_cron_add(c, "one-too-many", 1000, count_task, &x), -1);
	sbx_cron_free(c);
}

/* The thread runs the tasks, one added while it runs too, and none runs
 * once stop returned. */
static void cron_thread_runs_and_stops(void **state)
{
	struct sbx_cron *c = sbx_cron_new("t-cron", 5);
	struct counted a = COUNTED, b = COUNTED;
	int at_stop;

	(void)state;
	sbx_cron_add(c, "a", 5, count_task, &a);
	assert_int_equal(sbx_cron_start(c), 0);
	for (int i = 0; i < 2000 && runs_of(&a) < 3; i++)
		usleep(2000);
	assert_true(runs_of(&a) >= 3);
	sbx_cron_add(c, "b", 5, count_task, &b);
	for (int i = 0; i < 2000 && runs_of(&b) < 2; i++)
		usleep(2000);
	assert_true(runs_of(&b) >= 2);
	sbx_cron_stop(c);
	at_stop = runs_of(&a);
	usleep(30 * 1000);
	assert_int_equal(runs_of(&a), at_stop);
	sbx_cron_stop(c); /* idempotent */
	sbx_cron_free(c);
	sbx_cron_free(NULL);
}

/* ------------------------------------------------------------ work pool */

/* Jobs that block until released. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static int ran, cancelled;

static void gated_job(void *arg, bool was_cancelled)
{
	(void)arg;
	pthread_mutex_lock(&gate_lock);
	if (was_cancelled) {
		cancelled++;
	} else {
		while (!gate_open)
			pthread_cond_wait(&gate_cond, &gate_lock);
		ran++;
	}
	pthread_mutex_unlock(&gate_lock);
}

static int ran_now(void)
{
	int n;

	pthread_mutex_lock(&gate_lock);
	n = ran;
	pthread_mutex_unlock(&gate_lock);
	return n;
}

static void gate_set(bool open, bool reset)
{
	pthread_mutex_lock(&gate_lock);
	gate_open = open;
	if (reset)
		ran = cancelled = 0;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

static void wait_running(struct sbx_workpool *p, int n)
{
	struct sbx_workpool_stats st;

	for (int i = 0; i < 2500; i++) {
		sbx_workpool_stats(p, &st);
		if (st.running == n)
			return;
		usleep(2000);
	}
	fail_msg("%d jobs never ran", n);
}

/* 2 threads and 1 waiting job: the fourth busy job is refused. */
static void pool_is_bounded(void **state)
{
	struct sbx_workpool *p = sbx_workpool_new("t-work", 2, 1, 0);
	struct sbx_workpool_stats st;

	(void)state;
	gate_set(false, true);
	assert_non_null(p);
	sbx_workpool_stats(p, &st);
	assert_int_equal(st.threads, 0); /* started as needed */
	assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), 0);
	assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), 0);
	wait_running(p, 2);
	assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), 0);
	assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), -1);
	sbx_workpool_stats(p, &st);
	assert_int_equal(st.threads, 2);
	assert_int_equal(st.queued, 1);
	gate_set(true, false);
	/* The waiting one runs as soon as a thread is free. */
	for (int i = 0; i < 2500 && ran_now() < 3; i++)
		usleep(2000);
	sbx_workpool_free(p);
	assert_int_equal(ran, 3);
	assert_int_equal(cancelled, 0);
}

/* An eager pool has its threads from the start, and the same bound. */
static void pool_eager_starts_its_threads(void **state)
{
	struct sbx_workpool *p = sbx_workpool_new("t-work", 3, 0, SBX_WORKPOOL_EAGER);
	struct sbx_workpool_stats st;

	(void)state;
	gate_set(false, true);
	assert_non_null(p);
	sbx_workpool_stats(p, &st);
	assert_int_equal(st.threads, 3);
	/* an eager pool's threads stay, however long idle */
	sbx_workpool_set_idle_ms(p, 1);
	usleep(20 * 1000);
	sbx_workpool_stats(p, &st);
	assert_int_equal(st.threads, 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), 0);
	wait_running(p, 3);
	assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), -1);
	gate_set(true, false);
	sbx_workpool_free(p);
	assert_int_equal(ran, 3);
}

/* Threads of this process named `name` (/proc/self/task/TID/comm): the
 * ones that ended are gone from there, whatever the pool's counters say. */
static int os_threads_named(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d))) {
		char path[300], comm[32] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue; /* ended meanwhile */
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
		n += strcmp(comm, name) == 0;
	}
	closedir(d);
	return n;
}

static void wait_threads(struct sbx_workpool *p, const char *name, int n)
{
	struct sbx_workpool_stats st;

	for (int i = 0; i < 2500; i++) {
		sbx_workpool_stats(p, &st);
		if (st.threads == n && os_threads_named(name) == n)
			return;
		usleep(2000);
	}
	fail_msg("the pool never got down to %d threads (has %d)", n, st.threads);
}

/* A pool that is not eager holds no thread until a job comes, starts them
 * as jobs need them, and they end once idle for idle_ms; the next job
 * starts one again. */
static void pool_idle_threads_end(void **state)
{
	struct sbx_workpool *p = sbx_workpool_new("t-idle", 3, 2, 0);
	struct sbx_workpool_stats st;

	(void)state;
	gate_set(false, true);
	assert_non_null(p);
	sbx_workpool_set_idle_ms(p, 20);
	usleep(30 * 1000);
	sbx_workpool_stats(p, &st);
	assert_int_equal(st.threads, 0);
	assert_int_equal(os_threads_named("t-idle"), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), 0);
	wait_running(p, 3);
	sbx_workpool_stats(p, &st);
	assert_int_equal(st.threads, 3);
	assert_int_equal(os_threads_named("t-idle"), 3);
	gate_set(true, false);
	wait_threads(p, "t-idle", 0);
	assert_int_equal(ran_now(), 3);
	/* and back up on demand */
	assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), 0);
	for (int i = 0; i < 2500 && ran_now() < 4; i++)
		usleep(2000);
	assert_int_equal(ran_now(), 4);
	wait_threads(p, "t-idle", 0);
	sbx_workpool_free(p);
	assert_int_equal(os_threads_named("t-idle"), 0);
}

/* Stop cancels what waits and lets what runs finish. */
static void pool_stop_cancels_the_queue(void **state)
{
	struct sbx_workpool *p = sbx_workpool_new("t-work", 1, 4, 0);

	(void)state;
	gate_set(false, true);
	assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), 0);
	wait_running(p, 1);
	for (int i = 0; i < 3; i++)
		assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), 0);
	sbx_workpool_stop(p);
	assert_int_equal(cancelled, 3);
	assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), -1);
	gate_set(true, false);
	sbx_workpool_free(p);
	assert_int_equal(ran, 1);
}

static void *open_gate_later(void *arg)
{
	(void)arg;
	usleep(20 * 1000);
	gate_set(true, false);
	return NULL;
}

/* Drain runs what waits (none cancelled), returns once all ran, and
 * refuses new jobs from then on. */
static void pool_drain_runs_the_queue(void **state)
{
	struct sbx_workpool *p = sbx_workpool_new("t-work", 1, 4, SBX_WORKPOOL_EAGER);
	pthread_t t;

	(void)state;
	gate_set(false, true);
	assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), 0);
	wait_running(p, 1);
	for (int i = 0; i < 4; i++)
		assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), 0);
	pthread_create(&t, NULL, open_gate_later, NULL);
	sbx_workpool_drain(p);
	assert_int_equal(ran_now(), 5);
	assert_int_equal(cancelled, 0);
	assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), -1);
	sbx_workpool_drain(p); /* idempotent */
	pthread_join(t, NULL);
	sbx_workpool_free(p);
	assert_int_equal(ran, 5);
}

/* Until every job has returned (a job's key is released after its fn
 * returned, so `ran` is not enough). */
static void wait_idle(struct sbx_workpool *p)
{
	struct sbx_workpool_stats st;

	for (int i = 0; i < 2500; i++) {
		sbx_workpool_stats(p, &st);
		if (st.running == 0 && st.queued == 0)
			return;
		usleep(2000);
	}
	fail_msg("the pool never got idle");
}

/* A job that submits itself again under its own key from inside fn. */
static struct sbx_workpool *self_pool;
static int self_again = -2;

static void resubmitting_job(void *arg, bool was_cancelled)
{
	if (!was_cancelled)
		self_again = sbx_workpool_submit_once(self_pool, arg, resubmitting_job, arg);
}

/* submit_once: a key is busy while its job is queued or running (1, fn not
 * called), free again once fn returned (0); keys do not block each other
 * nor plain submits; the bound still holds. */
static void pool_submit_once_per_key(void **state)
{
	struct sbx_workpool *p = sbx_workpool_new("t-once", 2, 2, 0);
	struct sbx_workpool_stats st;
	int a, b, c;

	(void)state;
	gate_set(false, true);
	assert_int_equal(sbx_workpool_submit_once(p, &a, gated_job, NULL), 0);
	wait_running(p, 1);
	assert_int_equal(sbx_workpool_submit_once(p, &a, gated_job, NULL), 1); /* running */
	assert_int_equal(sbx_workpool_submit_once(p, &b, gated_job, NULL), 0);
	wait_running(p, 2);
	assert_int_equal(sbx_workpool_submit_once(p, &c, gated_job, NULL), 0);
	assert_int_equal(sbx_workpool_submit_once(p, &c, gated_job, NULL), 1); /* queued */
	assert_int_equal(sbx_workpool_submit_once(p, &b, gated_job, NULL), 1);
	assert_int_equal(sbx_workpool_submit_once(p, NULL, gated_job, NULL), -1);
	sbx_workpool_stats(p, &st);
	assert_int_equal(st.keyed, 3);
	assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), 0);	       /* no key */
	assert_int_equal(sbx_workpool_submit_once(p, &a, gated_job, NULL), 1); /* busy first */
	assert_int_equal(sbx_workpool_submit(p, gated_job, NULL), -1);	       /* full */
	gate_set(true, false);
	wait_idle(p);
	assert_int_equal(ran_now(), 4); /* none of the refused ones ran */
	sbx_workpool_stats(p, &st);
	assert_int_equal(st.keyed, 0);
	assert_int_equal(sbx_workpool_submit_once(p, &a, gated_job, NULL), 0);
	assert_int_equal(sbx_workpool_submit_once(p, &c, gated_job, NULL), 0);
	wait_idle(p);
	assert_int_equal(ran_now(), 6);

	/* held until fn returned: a job cannot queue itself again */
	self_pool = p;
	assert_int_equal(sbx_workpool_submit_once(p, &a, resubmitting_job, &a), 0);
	wait_idle(p);
	assert_int_equal(self_again, 1);
	assert_int_equal(sbx_workpool_submit_once(p, &a, gated_job, NULL), 0);
	wait_idle(p);
	sbx_workpool_free(p);
	assert_int_equal(ran, 7);
}

/* Stop cancels a queued keyed job: its key is released once the cancelled
 * fn returned; a running keyed job holds its key until it returns. */
static void pool_cancel_releases_key(void **state)
{
	struct sbx_workpool *p = sbx_workpool_new("t-once", 1, 2, 0);
	struct sbx_workpool_stats st;
	int a, b;

	(void)state;
	gate_set(false, true);
	assert_int_equal(sbx_workpool_submit_once(p, &a, gated_job, NULL), 0);
	wait_running(p, 1);
	assert_int_equal(sbx_workpool_submit_once(p, &b, gated_job, NULL), 0);
	assert_int_equal(sbx_workpool_submit_once(p, &b, gated_job, NULL), 1);
	sbx_workpool_stats(p, &st);
	assert_int_equal(st.keyed, 2);
	sbx_workpool_stop(p);
	assert_int_equal(cancelled, 1);
	sbx_workpool_stats(p, &st);
	assert_int_equal(st.keyed, 1);						/* &a runs on */
	assert_int_equal(sbx_workpool_submit_once(p, &b, gated_job, NULL), -1); /* stopped */
	gate_set(true, false);
	wait_idle(p);
	sbx_workpool_stats(p, &st);
	assert_int_equal(st.keyed, 0);
	sbx_workpool_free(p);
	assert_int_equal(ran, 1);
}

/* Submitters race with submit_once over a few keys: never two jobs with
 * one key at once, and every job accepted runs exactly once. */
#define ONCE_KEYS	     3
#define RACE_SUBMITTERS_ONCE 4
static struct sbx_workpool *once_pool;
static int once_keys[ONCE_KEYS];
static int once_active[ONCE_KEYS], once_overlaps, once_runs, once_accepted;

static void once_job(void *arg, bool was_cancelled)
{
	int *active = &once_active[(int *)arg - once_keys];

	(void)was_cancelled;
	if (__atomic_add_fetch(active, 1, __ATOMIC_SEQ_CST) > 1)
		__atomic_add_fetch(&once_overlaps, 1, __ATOMIC_SEQ_CST);
	usleep(100);
	__atomic_add_fetch(&once_runs, 1, __ATOMIC_SEQ_CST);
	__atomic_sub_fetch(active, 1, __ATOMIC_SEQ_CST);
}

static void *once_submitter(void *arg)
{
	(void)arg;
	for (int i = 0; i < 1000; i++) {
		int *key = &once_keys[i % ONCE_KEYS];

		if (sbx_workpool_submit_once(once_pool, key, once_job, key) == 0)
			__atomic_add_fetch(&once_accepted, 1, __ATOMIC_SEQ_CST);
		usleep(20); /* let jobs end, so that keys come free again */
	}
	return NULL;
}

static void pool_submit_once_races(void **state)
{
	pthread_t t[RACE_SUBMITTERS_ONCE];

	(void)state;
	once_pool = sbx_workpool_new("t-once", 4, 8, 0);
	for (int i = 0; i < RACE_SUBMITTERS_ONCE; i++)
		pthread_create(&t[i], NULL, once_submitter, NULL);
	for (int i = 0; i < RACE_SUBMITTERS_ONCE; i++)
		pthread_join(t[i], NULL);
	sbx_workpool_drain(once_pool);
	sbx_workpool_free(once_pool);
	assert_int_equal(once_overlaps, 0);
	assert_true(once_accepted > ONCE_KEYS);
	assert_int_equal(once_runs, once_accepted);
}

/* Submitters race each other and a stop: every job accepted is called
 * exactly once (run or cancelled), every job refused never. */
#define RACE_SUBMITTERS 4
#define RACE_JOBS	2000

static struct sbx_workpool *race_pool;
static int race_calls[RACE_SUBMITTERS * RACE_JOBS];
static bool race_accepted[RACE_SUBMITTERS * RACE_JOBS];

static void race_job(void *arg, bool was_cancelled)
{
	int *slot = arg;

	(void)was_cancelled;
	__atomic_add_fetch(slot, 1, __ATOMIC_RELAXED);
}

static void *race_submitter(void *arg)
{
	int base = (int)(intptr_t)arg * RACE_JOBS;

	for (int i = 0; i < RACE_JOBS; i++)
		race_accepted[base + i] =
		    sbx_workpool_submit(race_pool, race_job, &race_calls[base + i]) == 0;
	return NULL;
}

static void pool_no_job_lost_or_run_twice(void **state)
{
	pthread_t t[RACE_SUBMITTERS];
	int accepted = 0;

	(void)state;
	for (int round = 0; round < 2; round++) {
		memset(race_calls, 0, sizeof(race_calls));
		race_pool = sbx_workpool_new("t-work", 3, 16, 0);
		for (intptr_t i = 0; i < RACE_SUBMITTERS; i++)
			pthread_create(&t[i], NULL, race_submitter, (void *)i);
		usleep(2000);
		if (round == 0)
			sbx_workpool_stop(race_pool);
		else
			sbx_workpool_drain(race_pool);
		for (int i = 0; i < RACE_SUBMITTERS; i++)
			pthread_join(t[i], NULL);
		sbx_workpool_free(race_pool);
		for (int i = 0; i < RACE_SUBMITTERS * RACE_JOBS; i++) {
			int calls = __atomic_load_n(&race_calls[i], __ATOMIC_RELAXED);

			assert_int_equal(calls, race_accepted[i] ? 1 : 0);
			accepted += race_accepted[i];
		}
	}
	assert_true(accepted > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(cron_runs_with_period),
	    cmocka_unit_test(cron_keeps_schedule_without_bursts),
	    cmocka_unit_test(cron_refuses_bad_tasks),
	    cmocka_unit_test(cron_thread_runs_and_stops),
	    cmocka_unit_test(pool_is_bounded),
	    cmocka_unit_test(pool_eager_starts_its_threads),
	    cmocka_unit_test(pool_idle_threads_end),
	    cmocka_unit_test(pool_stop_cancels_the_queue),
	    cmocka_unit_test(pool_drain_runs_the_queue),
	    cmocka_unit_test(pool_no_job_lost_or_run_twice),
	    cmocka_unit_test(pool_submit_once_per_key),
	    cmocka_unit_test(pool_cancel_releases_key),
	    cmocka_unit_test(pool_submit_once_races),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
