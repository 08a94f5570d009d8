/* bench/hostile: what a hostile guest costs the other tenants.
 *
 * One daemon (harness.h, the tiny image, the hostile-guest kit on). Tenant
 * B keeps one sandbox and calls GET /v1/usage and exec `true` in a loop;
 * the bench measures those calls for SBX_BENCH_SECONDS (default 10) with
 * nothing else going on (idle), then while tenant A's guest misbehaves in
 * each way of the kit (docs/protocol.md, "A hostile guest") and while A
 * floods control-byte output, and prints p50/p99 per phase and the ratio
 * of each p99 to the idle one, measured in the same run. The first phase
 * after idle, busy, is no attack: A's guest only spins on its vCPU, which
 * it pays for. On a host with few cores that alone slows B (their guests
 * and the daemon share the cores), so each attack's p99 is also printed
 * as a ratio to busy's: what the misbehaviour costs B beyond a guest using
 * what it is entitled to. The phase `small_writes` is no attack either:
 * A streams the output of a program that writes one byte at a time
 * (`dd bs=1`: as many small frames as a legitimate program can make its
 * guest's agent send), to show what the frame budget does to such a
 * guest. For the phases where
 * A loops on its exec, a line says how A's own execs fared, and
 * whether the attack cost A its sandbox (then A stops); for every phase
 * another says how much CPU the daemon and libvirtd (the machine's, so
 * anyone's use of it counts) took while B was measured: the cost of A's
 * frames outside A's cgroup. The last two
 * phases restart the daemon first: A's guest was told to say HELLO v3
 * (reopen_v3) or nothing (reopen_silent) after the reopen, and then stops
 * reading while 12 commands of 60 KiB go to it (over the stream
 * transport, SBX_TEST_TRANSPORT=stream, it has the credit window anyway,
 * confirmed by the host's PINGs: docs/vmm.md). The phase file_trickle
 * has A download a file 8 times at once, again and again, from a guest
 * that sends each download one byte every 2 s: the "A's own" line then
 * counts those downloads (a cut one still answers 200: its head went
 * first) and their mean time.
 *
 * SBX_BENCH_PHASES (a comma-separated list, default all) runs only the
 * phases named (the idle one always runs first, for the ratios).
 *
 *   make bench && SBX_TEST_IMAGE_DIR=$PWD/build/images/tiny \
 *     SBX_BIN=$PWD/bin/sandboxd build/bench/hostile
 *
 * Prints figures; never fails on them. */
#include <pthread.h>
#include <stdbool.h>

#include "../tests/integration/harness.h"
#include "bench.h"

#define MAX_SAMPLES 20000

static struct daemon d;
static char key_b[128], sbx_b[64];

static int create_sandbox(const char *key, char *id, size_t idlen)
{
	struct http_reply r;
	int ok;

	if (http_request(&d, "POST", "/v1/sandboxes", key, NULL, "{\"timeout_minutes\": 30}", 0,
			 &r) < 0)
		return -1;
	ok = r.status == 201 && jstr(r.json, "id");
	if (ok)
		snprintf(id, idlen, "%s", jstr(r.json, "id"));
	http_reply_free(&r);
	return ok ? 0 : -1;
}

/* POST exec (with the kit's `how` in the env, or NULL; `accept` an
 * Accept header's value for a streamed exec, or NULL); the status. */
static int exec_status_as(const char *key, const char *id, const char *cmd, uint32_t timeout_ms,
			  const char *how, const char *accept)
{
	struct http_reply r;
	json_object *o = json_object_new_object();
	char path[128];
	int st;

	json_object_object_add(o, "command", json_object_new_string(cmd));
	if (timeout_ms)
		json_object_object_add(o, "timeout_ms", json_object_new_int64(timeout_ms));
	if (how) {
		json_object *env = json_object_new_object();

		json_object_object_add(env, "SBX_TEST_HOSTILE", json_object_new_string(how));
		json_object_object_add(o, "env", env);
	}
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", id);
	char headers[128] = "";
	if (accept)
		snprintf(headers, sizeof(headers), "Accept: %s\r\n", accept);
	st = http_request(&d, "POST", path, key, accept ? headers : NULL,
			  json_object_to_json_string(o), 0, &r) == 0
		 ? r.status
		 : -1;
	http_reply_free(&r);
	json_object_put(o);
	return st;
}

static int exec_status(const char *key, const char *id, const char *cmd, uint32_t timeout_ms,
		       const char *how)
{
	return exec_status_as(key, id, cmd, timeout_ms, how, NULL);
}

/* Does sandbox id still run? */
static bool sandbox_running(const char *key, const char *id)
{
	struct http_reply r;
	char path[128];
	bool running;

	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	if (http_request(&d, "GET", path, key, NULL, NULL, 0, &r) < 0)
		return false;
	running = r.status == 200 && r.json && jstr(r.json, "status") &&
		  strcmp(jstr(r.json, "status"), "running") == 0;
	http_reply_free(&r);
	return running;
}

/* ------------------------------------------------ A's misbehaviour */

struct hostile {
	const char *how; /* kit behaviour, "flood" (output), "deaf" (stop_reading
			  * and 12 commands of 60 KiB), or NULL (idle) */
	char id[64];
	pthread_t thread;
	bool stop;
	pthread_mutex_t lock;
	/* A's own execs in the phase (exec_until_stopped): answered 200, not,
	 * their total time; and whether A's sandbox ended under the attack */
	int a_ok, a_failed;
	int64_t a_ms;
	bool a_ended;
};

static char mid_cmd[60 * 1024]; /* "true" and spaces */

static void *mid_exec_main(void *arg)
{
	exec_status(d.key, arg, mid_cmd, 30000, NULL);
	return NULL;
}

/* Run cmd in A's sandbox (with the kit's `how`, or NULL; streamed when
 * `accept` is set) again and again until the phase ends (h->stop), or
 * until A's sandbox no longer runs (the attack cost it its sandbox). */
static void exec_until_stopped_as(struct hostile *h, const char *cmd, const char *how,
				  const char *accept)
{
	for (;;) {
		pthread_mutex_lock(&h->lock);
		bool stop = h->stop;
		pthread_mutex_unlock(&h->lock);
		if (stop)
			return;
		int64_t t0 = sbx_mono_ms();
		int st = exec_status_as(d.key, h->id, cmd, 30000, how, accept);
		bool ended = false;
		/* after a failure, wait (up to 5 s) to see whether the sandbox
		 * ends, rather than calling again at once */
		for (int i = 0; st != 200 && !ended && i < 50; i++) {
			ended = !sandbox_running(d.key, h->id);
			if (!ended)
				usleep(100 * 1000);
		}
		pthread_mutex_lock(&h->lock);
		h->a_ok += st == 200;
		h->a_failed += st != 200;
		h->a_ms += sbx_mono_ms() - t0;
		h->a_ended = ended;
		pthread_mutex_unlock(&h->lock);
		if (ended)
			return;
	}
}

static void exec_until_stopped(struct hostile *h, const char *cmd, const char *how)
{
	exec_until_stopped_as(h, cmd, how, NULL);
}

/* The file_trickle phase: TRICKLERS downloads of A's at once, each sent
 * one byte every 2 s by A's guest, again and again until the phase ends:
 * they hold A's files slots and connections until the minimum-progress
 * rule cuts them (docs/api.md "Fair share"). */
#define TRICKLERS 8

static void *trickle_main(void *arg)
{
	struct hostile *h = arg;
	char path[160];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s/files?path=/tmp/trickle", h->id);
	for (;;) {
		struct http_reply r;
		int64_t t0 = sbx_mono_ms();

		pthread_mutex_lock(&h->lock);
		bool stop = h->stop;
		pthread_mutex_unlock(&h->lock);
		if (stop)
			return NULL;
		int st =
		    http_request(&d, "GET", path, d.key, NULL, NULL, 0, &r) == 0 ? r.status : -1;
		/* a cut download still answered 200 (its head went first) */
		if (st >= 0)
			http_reply_free(&r);
		pthread_mutex_lock(&h->lock);
		h->a_ok += st == 200;
		h->a_failed += st != 200;
		h->a_ms += sbx_mono_ms() - t0;
		pthread_mutex_unlock(&h->lock);
		if (st < 0)
			usleep(100 * 1000);
	}
}

static void *hostile_main(void *arg)
{
	struct hostile *h = arg;

	if (strcmp(h->how, "deaf") == 0) {
		pthread_t t[12];

		exec_status(d.key, h->id, "true", 2000, "stop_reading");
		for (int i = 0; i < 12; i++)
			pthread_create(&t[i], NULL, mid_exec_main, h->id);
		for (int i = 0; i < 12; i++)
			pthread_join(t[i], NULL);
		return NULL;
	}
	if (strcmp(h->how, "busy") == 0) {
		exec_until_stopped(h, "timeout 3 sh -c 'while :; do :; done'", NULL);
		return NULL;
	}
	if (strcmp(h->how, "tiny_frames") == 0) {
		exec_until_stopped(h, "true", h->how);
		return NULL;
	}
	if (strcmp(h->how, "small_writes") == 0) {
		/* legitimate: streamed output written one byte at a time */
		exec_until_stopped_as(h, "dd if=/dev/zero bs=1 count=100000 2>/dev/null", NULL,
				      "application/x-ndjson");
		return NULL;
	}
	if (strcmp(h->how, "flood") == 0) {
		exec_until_stopped(h,
				   "head -c 1048576 /dev/zero | tr '\\0' '\\1'; "
				   "head -c 1048576 /dev/zero | tr '\\0' '\\2' >&2",
				   NULL);
		return NULL;
	}
	if (strcmp(h->how, "file_trickle") == 0) {
		pthread_t t[TRICKLERS];

		if (exec_status(d.key, h->id, "head -c 1048576 /dev/zero > /tmp/trickle", 0,
				NULL) != 200 ||
		    exec_status(d.key, h->id, "true", 0, h->how) != 200)
			return NULL;
		for (int i = 0; i < TRICKLERS; i++)
			pthread_create(&t[i], NULL, trickle_main, h);
		for (int i = 0; i < TRICKLERS; i++)
			pthread_join(t[i], NULL);
		return NULL;
	}
	exec_status(d.key, h->id, "true", 2000, h->how);
	return NULL;
}

/* --------------------------------------------------- B's measurement */

struct lat {
	int64_t usage[MAX_SAMPLES], exec[MAX_SAMPLES];
	int n_usage, n_exec, failures;
};

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* CPU time (user + system, ms) process `pid` has used so far; -1 when it
 * cannot be read. */
static long cpu_ms_of(pid_t pid)
{
	char path[64], line[1024];
	unsigned long ut, st;
	long ticks = sysconf(_SC_CLK_TCK);
	FILE *f;
	char *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	p = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
	fclose(f);
	/* after "(comm)": state and 10 more fields, then utime and stime */
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2 ||
	    ticks <= 0)
		return -1;
	return (long)((ut + st) * 1000 / (unsigned long)ticks);
}

/* libvirtd's pid (0 when unknown). */
static pid_t libvirtd_pid(void)
{
	FILE *f = fopen("/run/libvirtd.pid", "re");
	int pid = 0;

	if (f) {
		if (fscanf(f, "%d", &pid) != 1)
			pid = 0;
		fclose(f);
	}
	return (pid_t)pid;
}

/* B's calls for `seconds`; latencies in microseconds. */
static void measure(struct lat *l, int seconds)
{
	int64_t end = sbx_mono_ms() + (int64_t)seconds * 1000;

	memset(l, 0, sizeof(*l));
	while (sbx_mono_ms() < end && l->n_exec < MAX_SAMPLES) {
		struct http_reply r;
		int64_t t0 = now_us();
		int st = http_request(&d, "GET", "/v1/usage", key_b, NULL, NULL, 0, &r) == 0
			     ? r.status
			     : -1;

		http_reply_free(&r);
		l->usage[l->n_usage++] = now_us() - t0;
		l->failures += st != 200;
		t0 = now_us();
		st = exec_status(key_b, sbx_b, "true", 0, NULL);
		l->exec[l->n_exec++] = now_us() - t0;
		l->failures += st != 200;
	}
}

static int64_t p99_of(int64_t *v, int n)
{
	int i;

	if (n <= 0)
		return 0;
	stats_of(v, n); /* sorts */
	i = (n * 99 + 99) / 100 - 1;
	return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* p99s of a phase B's calls were measured in (0: not measured). */
struct p99s {
	int64_t usage, exec;
};

static double ratio(int64_t a, int64_t b)
{
	return b ? (double)a / (double)b : 0.0;
}

/* One line for a phase: p50, p99 and its ratio to idle; to busy too when
 * busy was measured and this is an attack. Returns the phase's p99s. */
static struct p99s report(const char *phase, struct lat *l, struct p99s idle, struct p99s busy)
{
	struct p99s p = {p99_of(l->usage, l->n_usage), p99_of(l->exec, l->n_exec)};
	struct stats us = stats_of(l->usage, l->n_usage), es = stats_of(l->exec, l->n_exec);

	if (!idle.exec) /* this is idle */
		idle = p;
	printf("%-13s usage p50 %6.2f ms p99 %7.2f ms (x%.2f)   exec true p50 %6.1f ms p99 %7.1f "
	       "ms (x%.2f)   n=%d failures=%d",
	       phase, us.median / 1000.0, p.usage / 1000.0, ratio(p.usage, idle.usage),
	       es.median / 1000.0, p.exec / 1000.0, ratio(p.exec, idle.exec), l->n_exec,
	       l->failures);
	if (busy.exec)
		printf("   vs busy: usage x%.2f exec x%.2f", ratio(p.usage, busy.usage),
		       ratio(p.exec, busy.exec));
	printf("\n");
	fflush(stdout);
	return p;
}

/* Whether SBX_BENCH_PHASES (comma-separated; unset: all) names phase. */
static bool phase_wanted(const char *phase)
{
	const char *list = getenv("SBX_BENCH_PHASES");
	size_t n = strlen(phase);

	if (!list || !list[0])
		return true;
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, ",");

		if (len == n && strncmp(p, phase, n) == 0)
			return true;
		p += len + (p[len] == ',');
	}
	return false;
}

/* exec `echo` in sandbox id until it answers 200, up to 30 s. */
static int wait_ok(const char *key, const char *id)
{
	for (int i = 0; i < 120; i++) {
		if (exec_status(key, id, "echo", 5000, NULL) == 200)
			return 0;
		usleep(250 * 1000);
	}
	return -1;
}

/* The reopen phases: tell A's guest `how`, restart the daemon (the guests
 * survive: destroy_on_exit false), wait for both sandboxes to answer, then
 * A's guest goes deaf under 12 commands of 60 KiB ("deaf"). */
static int reopen(struct hostile *h, const char *how)
{
	if (exec_status(d.key, h->id, "true", 0, how) != 200 || daemon_stop(&d) != 0 ||
	    daemon_start(&d) < 0 || wait_ok(key_b, sbx_b) < 0 || wait_ok(d.key, h->id) < 0)
		return -1;
	h->how = "deaf";
	return 0;
}

int main(void)
{
	static const char *const phases[] = {
	    "busy",  "small_writes", "blackhole",    "unknown_ids", "hello_flood",  "stop_reading",
	    "flood", "tiny_frames",  "file_trickle", "reopen_v3",   "reopen_silent"};
	int seconds = env_int_max("SBX_BENCH_SECONDS", 10, 600);
	static struct lat l;
	struct p99s idle, busy = {0, 0};

	daemon_config(&d, "\"test_hostile_guests\": true, \"exec_backstop_grace_ms\": 2000, "
			  "\"destroy_on_exit\": false");
	daemon_create_account(&d, "100");
	json_object *o = daemon_admin(&d, "create-account --name tenant-b --credit-usd 100");
	json_object *v;
	if (!o || !json_object_object_get_ex(o, "api_key", &v)) {
		fprintf(stderr, "hostile bench: no second account\n");
		return 1;
	}
	snprintf(key_b, sizeof(key_b), "%s", json_object_get_string(v));
	json_object_put(o);
	if (daemon_start(&d) < 0 || create_sandbox(key_b, sbx_b, sizeof(sbx_b)) < 0) {
		fprintf(stderr, "hostile bench: daemon or B's sandbox did not start\n");
		daemon_down(&d);
		return 1;
	}
	memset(mid_cmd, ' ', sizeof(mid_cmd) - 1);
	memcpy(mid_cmd, "true", 4);
	printf("tenant B's calls, %d s per phase, while tenant A's guest misbehaves "
	       "(ratios: p99 / idle p99)\n",
	       seconds);
	long i0 = cpu_ms_of(d.pid);
	measure(&l, seconds);
	long i1 = cpu_ms_of(d.pid);
	idle = report("idle", &l, busy, busy);
	if (i0 >= 0 && i1 >= 0)
		printf("%-13s CPU while measured: daemon %ld ms\n", "", i1 - i0);

	for (size_t i = 0; i < SBX_ARRAY_SIZE(phases); i++) {
		struct hostile h = {.how = phases[i], .lock = PTHREAD_MUTEX_INITIALIZER};

		if (!phase_wanted(phases[i]))
			continue;
		if (create_sandbox(d.key, h.id, sizeof(h.id)) < 0) {
			printf("%-13s (A's sandbox did not start)\n", phases[i]);
			continue;
		}
		if (strncmp(phases[i], "reopen_", 7) == 0 && reopen(&h, phases[i]) < 0) {
			printf("%-13s (the restart failed)\n", phases[i]);
			break;
		}
		pthread_create(&h.thread, NULL, hostile_main, &h);
		pid_t lv = libvirtd_pid();
		long d0 = cpu_ms_of(d.pid), l0 = lv ? cpu_ms_of(lv) : -1;
		measure(&l, seconds);
		long d1 = cpu_ms_of(d.pid), l1 = lv ? cpu_ms_of(lv) : -1;
		struct p99s p = report(phases[i], &l, idle, busy);
		/* the daemon's own; libvirtd is the machine's (other users too) */
		if (d0 >= 0 && d1 >= 0)
			printf("%-13s CPU while measured: daemon %ld ms, libvirtd %ld ms\n", "",
			       d1 - d0, l0 >= 0 && l1 >= 0 ? l1 - l0 : -1L);
		if (strcmp(phases[i], "busy") == 0)
			busy = p;
		pthread_mutex_lock(&h.lock);
		h.stop = true;
		pthread_mutex_unlock(&h.lock);
		pthread_join(h.thread, NULL);
		if (h.a_ok + h.a_failed > 0)
			printf("%-13s A's own %s: %d, mean %.0f ms, %d answered 200%s\n", "",
			       strcmp(phases[i], "file_trickle") == 0 ? "downloads" : "execs",
			       h.a_ok + h.a_failed, (double)h.a_ms / (h.a_ok + h.a_failed), h.a_ok,
			       h.a_ended ? "; A's sandbox ended under it" : "");
		char path[128];
		struct http_reply r;
		snprintf(path, sizeof(path), "/v1/sandboxes/%s", h.id);
		if (http_request(&d, "DELETE", path, d.key, NULL, NULL, 0, &r) == 0)
			http_reply_free(&r);
	}
	daemon_down(&d);
	return 0;
}
