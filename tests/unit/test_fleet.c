/* Unit tests of fleet/ with no guest: the boot slots (customers wait,
 * the pool yields to a waiting customer, stop fails waiters), the
 * registry of live guests by id, and the live guest object (its state
 * machine, pin against end, the last unref frees). The placement rule's
 * own tests are in test_placement.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include <string.h>

#include "agentless/agentless.h"
#include "agentless/wire.h"
#include "fleet/fleet.h"
#include "util/util.h"

/* Slots up to max are handed out at once; the next customer waits until
 * its deadline and gets a 503 with Retry-After 5. */
static void test_slots_cap(void **state)
{
	struct fleet_slots s;
	struct sbx_error err;

	(void)state;
	fleet_slots_init(&s, 2);
	assert_int_equal(fleet_slot_acquire(&s, sbx_mono_ms() + 1000, &err), 0);
	assert_true(fleet_slot_try_pool(&s));
	assert_int_equal(fleet_slots_active(&s), 2);
	assert_false(fleet_slot_try_pool(&s));
	sbx_error_clear(&err);
	assert_int_equal(fleet_slot_acquire(&s, sbx_mono_ms() + 150, &err), -1);
	assert_int_equal(err.code, SBX_E_SERVICE_UNAVAILABLE);
	assert_int_equal(err.retry_after_s, 5);
	fleet_slot_release(&s);
	assert_int_equal(fleet_slots_active(&s), 1);
	assert_int_equal(fleet_slot_acquire(&s, sbx_mono_ms() + 1000, &err), 0);
	fleet_slot_release(&s);
	fleet_slot_release(&s);
	assert_int_equal(fleet_slots_active(&s), 0);
	fleet_slots_destroy(&s);
}

struct waiter {
	struct fleet_slots *s;
	int64_t deadline;
	int rc;
	struct sbx_error err;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	w->rc = fleet_slot_acquire(w->s, w->deadline, &w->err);
	return NULL;
}

static void wait_for_waiting(struct fleet_slots *s)
{
	for (;;) {
		int n;

		pthread_mutex_lock(&s->lock);
		n = s->waiting;
		pthread_mutex_unlock(&s->lock);
		if (n > 0)
			return;
		usleep(1000);
	}
}

/* A customer waiting for a slot: the pool may not take the one freed;
 * the customer gets it. */
static void test_slots_customer_first(void **state)
{
	struct fleet_slots s;
	struct sbx_error err;
	struct waiter w = {.s = &s};
	pthread_t t;

	(void)state;
	fleet_slots_init(&s, 1);
	assert_int_equal(fleet_slot_acquire(&s, sbx_mono_ms() + 1000, &err), 0);
	w.deadline = sbx_mono_ms() + 60000;
	assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
	wait_for_waiting(&s);
	assert_false(fleet_slot_try_pool(&s));
	/* the moment between a release and the waiter waking: a slot is free
	 * but a customer still waits, so the pool may not take it */
	pthread_mutex_lock(&s.lock);
	s.active--;
	pthread_mutex_unlock(&s.lock);
	assert_false(fleet_slot_try_pool(&s));
	pthread_mutex_lock(&s.lock);
	s.active++;
	pthread_mutex_unlock(&s.lock);
	fleet_slot_release(&s);
	pthread_join(t, NULL);
	assert_int_equal(w.rc, 0);
	assert_int_equal(fleet_slots_active(&s), 1);
	assert_false(fleet_slot_try_pool(&s));
	fleet_slot_release(&s);
	assert_true(fleet_slot_try_pool(&s));
	fleet_slot_release(&s);
	fleet_slots_destroy(&s);
}

/* Stop fails a waiting customer long before its deadline, and every
 * later one that would wait; the pool takes no slot once stopped. */
static void test_slots_stop(void **state)
{
	struct fleet_slots s;
	struct sbx_error err;
	struct waiter w = {.s = &s};
	pthread_t t;
	int64_t t0;

	(void)state;
	fleet_slots_init(&s, 1);
	assert_int_equal(fleet_slot_acquire(&s, sbx_mono_ms() + 1000, &err), 0);
	w.deadline = sbx_mono_ms() + 600000;
	assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
	wait_for_waiting(&s);
	fleet_slots_stop(&s);
	pthread_join(t, NULL);
	assert_int_equal(w.rc, -1);
	assert_int_equal(w.err.code, SBX_E_SERVICE_UNAVAILABLE);
	/* a later customer that would wait fails at once, not at its deadline */
	t0 = sbx_mono_ms();
	assert_int_equal(fleet_slot_acquire(&s, t0 + 600000, &err), -1);
	assert_true(sbx_mono_ms() - t0 < 300000);
	fleet_slot_release(&s);
	assert_false(fleet_slot_try_pool(&s));
	assert_int_equal(fleet_slots_active(&s), 0);
	fleet_slots_destroy(&s);
}

/* The registry finds every guest linked by its id through growth, and
 * none once it is unlinked. */
static void test_registry(void **state)
{
	enum { N = 500 };
	static struct fleet_node nodes[N];
	static char keys[N][16];
	struct fleet_registry r;

	(void)state;
	assert_int_equal(fleet_registry_init(&r), 0);
	assert_null(fleet_registry_get(&r, "sbx_0"));
	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "sbx_%d", i);
		nodes[i].key = keys[i];
		fleet_registry_put(&r, &nodes[i]);
	}
	assert_int_equal(r.count, N);
	assert_true(r.n_buckets >= N);
	for (int i = 0; i < N; i++)
		assert_ptr_equal(fleet_registry_get(&r, keys[i]), &nodes[i]);
	assert_null(fleet_registry_get(&r, "sbx_500"));
	assert_null(fleet_registry_del(&r, "sbx_500"));
	for (int i = 0; i < N; i += 2)
		assert_ptr_equal(fleet_registry_del(&r, keys[i]), &nodes[i]);
	assert_int_equal(r.count, N / 2);
	for (int i = 0; i < N; i++) {
		if (i % 2)
			assert_ptr_equal(fleet_registry_get(&r, keys[i]), &nodes[i]);
		else
			assert_null(fleet_registry_get(&r, keys[i]));
	}
	assert_null(fleet_registry_del(&r, keys[0]));
	fleet_registry_free(&r);
	assert_null(fleet_registry_get(&r, keys[1]));
}

/* ------------------------------------------------------- the live guest */

/* Every move of the state machine: the legal ones are taken, the others
 * refused with the state unchanged. */
static void test_guest_states(void **state)
{
	static const bool legal[5][5] = {
	    /* to:  BOOTING POOLED RUNNING ENDING GONE */
	    [FLEET_GUEST_BOOTING] = {false, true, true, true, false},
	    [FLEET_GUEST_POOLED] = {false, false, true, true, false},
	    [FLEET_GUEST_RUNNING] = {false, false, false, true, false},
	    [FLEET_GUEST_ENDING] = {false, false, false, false, true},
	    [FLEET_GUEST_GONE] = {false, false, false, false, false},
	};
	/* a path from BOOTING to each state */
	static const enum fleet_guest_state path[5][4] = {
	    [FLEET_GUEST_BOOTING] = {0},
	    [FLEET_GUEST_POOLED] = {FLEET_GUEST_POOLED},
	    [FLEET_GUEST_RUNNING] = {FLEET_GUEST_RUNNING},
	    [FLEET_GUEST_ENDING] = {FLEET_GUEST_ENDING},
	    [FLEET_GUEST_GONE] = {FLEET_GUEST_ENDING, FLEET_GUEST_GONE},
	};
	static const int path_len[5] = {0, 1, 1, 1, 2};

	(void)state;
	for (int from = 0; from < 5; from++) {
		for (int to = 0; to < 5; to++) {
			struct fleet_guest *g = fleet_guest_new(NULL, NULL, "sbx_states");

			assert_int_equal(fleet_guest_state(g), FLEET_GUEST_BOOTING);
			for (int k = 0; k < path_len[from]; k++)
				assert_int_equal(fleet_guest_set_state(g, path[from][k]), 0);
			assert_int_equal(fleet_guest_state(g), from);
			assert_int_equal(fleet_guest_set_state(g, to), legal[from][to] ? 0 : -1);
			assert_int_equal(fleet_guest_state(g), legal[from][to] ? to : from);
			fleet_guest_unref(g);
		}
	}
	assert_string_equal(fleet_guest_state_name(FLEET_GUEST_POOLED), "pooled");
}

/* A fake channel: counts what is sent, remembers that it was closed. */
struct fake_ch {
	int sends;
	int closed;
};

static int fake_send(void *ctx, const void *buf, size_t len)
{
	struct fake_ch *f = ctx;

	(void)buf;
	(void)len;
	__atomic_add_fetch(&f->sends, 1, __ATOMIC_RELAXED);
	return 0;
}

static void fake_close(void *ctx)
{
	struct fake_ch *f = ctx;

	__atomic_add_fetch(&f->closed, 1, __ATOMIC_RELAXED);
}

static struct sbx_channel fake_channel(struct fake_ch *f)
{
	return (struct sbx_channel){.ctx = f, .send = fake_send, .close = fake_close};
}

/* The guest's HELLO, as if it came over the channel. */
static void feed_hello(struct agentless_conn *c)
{
	uint8_t buf[WIRE_HEADER_LEN + 64];
	struct wire_writer w;
	struct wire_header h = {.type = WIRE_HELLO};

	wire_writer_init(&w, buf + WIRE_HEADER_LEN, 64);
	wire_put_u32(&w, WIRE_T_VERSION, WIRE_VERSION);
	wire_put_u32(&w, WIRE_T_VERSION_MIN, WIRE_VERSION_MIN);
	h.len = (uint32_t)w.len;
	wire_header_encode(&h, buf);
	agentless_conn_recv(c, buf, WIRE_HEADER_LEN + w.len);
}

static int prestarts_freed;

static void count_prestart_free(struct prestart *ps)
{
	(void)ps;
	prestarts_freed++;
}

/* A ready guest on a fake channel, with a prestart to be freed. */
static struct fleet_guest *ready_guest(struct fake_ch *f)
{
	static int prestart_token;
	struct fleet_guest *g = fleet_guest_new(NULL, NULL, "sbx_pin");
	struct sbx_error err;

	g->conn = agentless_conn_new(NULL, NULL, NULL);
	g->prestart = (struct prestart *)&prestart_token;
	g->prestart_free = count_prestart_free;
	agentless_conn_attach(g->conn, fake_channel(f), false);
	feed_hello(g->conn);
	assert_int_equal(agentless_conn_wait_hello(g->conn, sbx_mono_ms() + 5000, &err), 0);
	assert_int_equal(fleet_guest_set_state(g, FLEET_GUEST_RUNNING), 0);
	return g;
}

struct done_rec {
	int calls;
	struct sbx_error err;
};

static void exec_done(void *opaque, struct agentless_exec_result *res, const struct sbx_error *err)
{
	struct done_rec *d = opaque;

	__atomic_add_fetch(&d->calls, 1, __ATOMIC_RELAXED);
	if (res)
		agentless_exec_result_release(res);
	if (err)
		d->err = *err;
}

static const struct agentless_exec_req exec_req = {
    .command = "true",
    .command_len = 4,
    .cwd = "/",
    .timeout_ms = 60000,
    .stdout_cap = 1024,
    .stderr_cap = 1024,
};

/* A pinned guest outlives its end: the end fails the exec in flight with
 * its reason, closes the channel and moves to GONE without waiting for
 * the pin; every later call through the pin fails at once with a clean
 * error (no use after free: ASan); a channel attached after the end is
 * closed at once; the memory (and the prestart) goes with the last
 * unref, not before. */
static void test_guest_pin_outlives_end(void **state)
{
	struct fake_ch f = {0}, f2 = {0};
	struct fleet_guest *g, *pin;
	struct done_rec d = {0}, d2 = {0};
	struct sbx_error err;
	int64_t t0;

	(void)state;
	prestarts_freed = 0;
	g = ready_guest(&f);
	pin = g;
	fleet_guest_ref(pin); /* a request pins it */
	assert_int_equal(agentless_exec_start(g->conn, &exec_req, exec_done, &d, &err), 0);
	assert_int_equal(fleet_guest_usable(pin, "sbx_pin", &err), 0);

	/* the owner ends it, while the pin is held */
	assert_int_equal(fleet_guest_end_begin(g, FLEET_END_DELETED), 0);
	assert_int_equal(fleet_guest_end_begin(g, FLEET_END_EXPIRED), -1); /* once */
	fleet_guest_end(g, "the sandbox was deleted");
	assert_int_equal(d.calls, 1);
	assert_int_equal(d.err.code, SBX_E_SANDBOX_ERROR);
	assert_string_equal(d.err.message, "the sandbox was deleted");
	assert_int_equal(f.closed, 1);
	assert_int_equal(fleet_guest_state(g), FLEET_GUEST_GONE);
	fleet_guest_unref(g); /* the owner's ref */
	assert_int_equal(prestarts_freed, 0);

	/* the pinned caller: clean, fast failures */
	assert_int_equal(fleet_guest_end_why(pin), FLEET_END_DELETED);
	assert_true(fleet_guest_over(pin));
	sbx_error_clear(&err);
	assert_int_equal(fleet_guest_usable(pin, "sbx_pin", &err), -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_NOT_RUNNING);
	sbx_error_clear(&err);
	assert_int_equal(agentless_exec_start(pin->conn, &exec_req, exec_done, &d2, &err), -1);
	assert_int_equal(err.code, SBX_E_SANDBOX_ERROR);
	assert_string_equal(err.message, "the sandbox was deleted");
	assert_int_equal(d2.calls, 0);
	t0 = sbx_mono_ms();
	assert_true(agentless_conn_ping(pin->conn, 0, t0 + 60000, NULL) < 0);
	assert_true(sbx_mono_ms() - t0 < 30000);
	assert_false(agentless_conn_alive(pin->conn));
	/* a reopen racing the end: the new channel is closed, not kept */
	agentless_conn_attach(pin->conn, fake_channel(&f2), true);
	assert_int_equal(f2.closed, 1);
	assert_int_equal(f2.sends, 0);
	/* ending again is harmless */
	fleet_guest_end(pin, "again");
	assert_int_equal(f.closed, 1);

	fleet_guest_unref(pin); /* the last: frees conn, prestart, guest */
	assert_int_equal(prestarts_freed, 1);
}

/* A guest never ended (its owner let go of it, e.g. the service stops
 * and leaves it running) is freed by its last unref all the same: conn
 * closed and freed, prestart freed. */
static void test_guest_last_unref_frees(void **state)
{
	struct fake_ch f = {0};
	struct fleet_guest *g;
	struct done_rec d = {0};
	struct sbx_error err;

	(void)state;
	prestarts_freed = 0;
	g = ready_guest(&f);
	assert_int_equal(agentless_exec_start(g->conn, &exec_req, exec_done, &d, &err), 0);
	fleet_guest_ref(g);
	fleet_guest_unref(g);
	assert_int_equal(prestarts_freed, 0);
	assert_int_equal(f.closed, 0);
	fleet_guest_unref(g);
	assert_int_equal(prestarts_freed, 1);
	assert_int_equal(f.closed, 1);
	assert_int_equal(d.calls, 1); /* failed, not lost */
}

/* A dead guest is not handed on (a pause, a resume's relink): the take
 * for a guest that is to live on leaves it linked for the supervisor,
 * which takes it to end it. */
static void test_take_alive_skips_dead(void **state)
{
	struct sandbox_config cfg;
	struct fake_ch f = {0};
	struct fleet *fl;
	struct fleet_guest *g, *t;

	(void)state;
	memset(&cfg, 0, sizeof(cfg));
	cfg.max_concurrent_boots = 1;
	fl = fleet_new(&cfg, NULL);
	assert_non_null(fl);
	g = ready_guest(&f);
	snprintf(g->id, sizeof(g->id), "%s", "sbx_dead");
	fleet_live_link(fl, g);
	assert_true(fleet_guest_mark_dead(g, sbx_wall_ms()));
	assert_null(fleet_live_take_alive(fl, "sbx_dead", FLEET_END_PAUSED));
	assert_false(fleet_live_alive(fl, "sbx_dead"));
	t = fleet_live_take(fl, "sbx_dead", FLEET_END_FAILED);
	assert_ptr_equal(t, g);
	fleet_guest_unref(t);

	/* a live one is taken */
	g = ready_guest(&f);
	snprintf(g->id, sizeof(g->id), "%s", "sbx_live");
	fleet_live_link(fl, g);
	t = fleet_live_take_alive(fl, "sbx_live", FLEET_END_PAUSED);
	assert_ptr_equal(t, g);
	assert_null(fleet_live_take(fl, "sbx_live", FLEET_END_FAILED));
	fleet_guest_unref(t);
	fleet_stop(fl);
	fleet_free(fl);
}

struct racer {
	struct fleet_guest *g; /* pinned by the racer */
	int ok, failed;
	struct done_rec d;
	bool bad_error;
};

static void *racer_main(void *arg)
{
	struct racer *r = arg;

	for (int i = 0; i < 2000; i++) {
		struct sbx_error err;

		sbx_error_clear(&err);
		if (agentless_exec_start(r->g->conn, &exec_req, exec_done, &r->d, &err) == 0) {
			r->ok++;
		} else {
			r->failed++;
			if (err.code != SBX_E_SANDBOX_ERROR && err.code != SBX_E_RATE_LIMITED)
				r->bad_error = true;
		}
		agentless_conn_tick(r->g->conn, sbx_mono_ms());
		if (fleet_guest_over(r->g) && r->failed > 0)
			break;
	}
	fleet_guest_unref(r->g);
	return NULL;
}

/* Callers pinned on other threads race the end: each exec either starts
 * (and is then failed by the end, exactly once) or fails cleanly; the
 * last unref, wherever it lands, frees once (TSan and ASan watch). */
static void test_guest_end_races_pins(void **state)
{
	enum { N = 3 };
	struct fake_ch f = {0};
	struct racer rs[N];
	pthread_t ts[N];
	struct fleet_guest *g;

	(void)state;
	prestarts_freed = 0;
	g = ready_guest(&f);
	memset(rs, 0, sizeof(rs));
	for (int i = 0; i < N; i++) {
		rs[i].g = g;
		fleet_guest_ref(g);
		assert_int_equal(pthread_create(&ts[i], NULL, racer_main, &rs[i]), 0);
	}
	usleep(2000);
	fleet_guest_end(g, "the sandbox expired");
	fleet_guest_unref(g);
	for (int i = 0; i < N; i++) {
		pthread_join(ts[i], NULL);
		assert_false(rs[i].bad_error);
		assert_true(rs[i].failed > 0);
		/* every exec that started was answered exactly once */
		assert_int_equal(rs[i].d.calls, rs[i].ok);
	}
	assert_int_equal(prestarts_freed, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_slots_cap),
	    cmocka_unit_test(test_slots_customer_first),
	    cmocka_unit_test(test_slots_stop),
	    cmocka_unit_test(test_registry),
	    cmocka_unit_test(test_guest_states),
	    cmocka_unit_test(test_guest_pin_outlives_end),
	    cmocka_unit_test(test_guest_last_unref_frees),
	    cmocka_unit_test(test_guest_end_races_pins),
	    cmocka_unit_test(test_take_alive_skips_dead),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
