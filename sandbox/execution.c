/* execution: what the executions use case (executions.c) runs on: the
 * runtimes and their launchers, the runners, the execution pool and the
 * pre-started interpreters. See sandbox.h and docs/pool.md.
 *
 * Its parts, in the file's order:
 *   - the launcher (LAUNCH_HEAD, PRE_HEAD, PRE_READY) and the runtimes
 *     table (python, node, the test shell): runtime_command, runtime_find;
 *   - the runner a config picks and the checks of its execution keys
 *     (sandbox_execution_runner, sandbox_execution_config_validate);
 *   - the libvirt runner's guest: taken (guest_get: the one acquisition),
 *     given back or ended (guest_put, guest_put_background);
 *   - the execution pool: an interpreter pre-started at pool time
 *     (sandbox_execution_prestart) and the warm run on it (deliver,
 *     run_prestarted); the cold run (sandbox_execution_run_cold);
 *   - the use case's entry points: the request's checks
 *     (sandbox_execution_check_req) and the run
 *     (sandbox_execution_runner_run):
 *       1. the launcher for the request's runtime;
 *       2. the configured runner: mock or dev-process (runner_dev.c, no
 *          guest), else libvirt (run_libvirt):
 *          a. a guest of the execution size (pre-started, pooled or booted);
 *          b. pre-started: the code delivered to the waiting interpreter;
 *             else the launcher run cold with the code on its stdin;
 *          c. the guest given back in the background; the result taken.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../agentless/agentless.h"
#include "../billing/billing.h"
#include "../receipt/receipt.h"
#include "../store/store.h"
#include "../vmm/vmm.h"
#include "sandbox-priv.h"
#include "sandbox.h"

#define MOD "execution"

/* The launcher: the code arrives on stdin (never on a command line), is
 * written to main.EXT in a fresh directory of its own (mktemp -d: 0700, so
 * the code stays private whatever the umask), and the program runs with
 * stdin at /dev/null. Nothing else of the launcher reaches user code: it
 * keeps the exec's umask (022), environment, limits, signal dispositions
 * and descriptors, and starts in the exec's default cwd (SANDBOX_EXEC_CWD). */
#define LAUNCH_HEAD "d=$(mktemp -d /tmp/sbxr.XXXXXX) && cat > \"$d/main.%s\" || exit 125; "

/* The execution pool (docs/pool.md "Execution guests"): the launcher is
 * started at pool time in a directory the host named (PRE_HEAD: mode 0700
 * like mktemp's, two FIFOs of mode 0600). The interpreter starts (its
 * bootstrap: `wait`), opens `ready` for writing (which blocks until the
 * pool's readiness exec, PRE_READY, reads it), writes its pid there and
 * closes it, then opens `go` for writing, which blocks until something
 * opens `go` for reading. PRE_READY (as root, for /proc) returns once that
 * pid sits in openat(2) (x86-64 syscall 257), i.e. in `go`'s open: then
 * the guest joins the pool. An execution delivers without starting any
 * process in the guest: a FILE_PUT of main.EXT (owner the exec user, mode
 * 0644: what the cold launcher's `cat >` makes under umask 022), then a
 * FILE_GET of `go`, whose non-blocking open in the guest's init wakes the
 * interpreter (and which then fails: not a regular file). The guest
 * handles frames in order, so the file is in place before the wake. */
#define PRE_HEAD "d=%s; mkdir -m 0700 \"$d\" && mkfifo -m 0600 \"$d/ready\" \"$d/go\" || exit 125; "
#define PRE_READY                                                                                  \
	"d=%s; while [ ! -p \"$d/ready\" ]; do sleep 0.05; done; p=$(cat \"$d/ready\"); "          \
	"case \"$p\" in ''|*[!0-9]*) exit 2;; esac; "                                              \
	"until read s r < /proc/$p/syscall && [ \"$s\" = 257 ]; do "                               \
	"[ -d /proc/$p ] || exit 3; sleep 0.01; done 2>/dev/null"

/* The runtimes. Their bootstraps are files of the repository
 * (images/runtimes/), shipped in the initramfs at SANDBOX_RUNTIMES_DIR
 * (images/build-tiny.sh; the init binds that directory read-only into a
 * root disk: guest/init.c). The dev-process runner, which has no guest,
 * reads them where the build found them: the checkout's images/runtimes
 * (SBX_REPO_RUNTIMES, set by the Makefile). */
#define SANDBOX_RUNTIMES_DIR "/usr/lib/sandboxd/runtimes"
#ifndef SBX_REPO_RUNTIMES
#define SBX_REPO_RUNTIMES "images/runtimes"
#endif

static const struct sandbox_runtime {
	const char *name, *ext;
	const char *interpreter;
	/* Its bootstrap, a file in the runtimes directory, or NULL:
	 *   copy: copied next to the code and run from there on both paths,
	 *     with the word `wait` when pre-started (node's run.cjs: the
	 *     code's directory is its __dirname, docs/receipts.md);
	 *   wait: run where it is installed, the directory its argument, by a
	 *     pre-started interpreter only (python's wait.py; cold, python3
	 *     runs main.py itself).
	 * Without one the interpreter runs "$d/main.EXT". */
	const char *copy, *wait;
	bool pool; /* it has an execution pool (a pre-started interpreter) */
	bool test_only;
} runtimes[] = {
    {"python", "py", "python3", NULL, "wait.py", true, false},
    {"node", "js", "node", "run.cjs", NULL, true, false},
    {"sh", "sh", "/bin/sh", NULL, NULL, false, true},
};

/* The launcher's tail, after the head that made "$d" (cold: LAUNCH_HEAD
 * and the code in main.EXT; pre-started: PRE_HEAD and the FIFOs), in
 * buf: copy the bootstrap, then exec the interpreter with stdin at
 * /dev/null. `dir` is where the bootstraps are; -1 when it cannot be
 * quoted or the command does not fit. */
static int runtime_command(const struct sandbox_runtime *rt, const char *dir, bool prestart,
			   char *buf, size_t size)
{
	int n;

	if (strchr(dir, '\''))
		return -1;
	if (rt->copy)
		n = snprintf(
		    buf, size, "cp '%s/%s' \"$d/%s\" || exit 125; exec %s \"$d/%s\"%s </dev/null",
		    dir, rt->copy, rt->copy, rt->interpreter, rt->copy, prestart ? " wait" : "");
	else if (prestart)
		n = snprintf(buf, size, "exec %s '%s/%s' \"$d\" </dev/null", rt->interpreter, dir,
			     rt->wait);
	else
		n = snprintf(buf, size, "exec %s \"$d/main.%s\" </dev/null", rt->interpreter,
			     rt->ext);
	return n < 0 || (size_t)n >= size ? -1 : 0;
}

static const struct sandbox_runtime *runtime_find(const struct sandbox_config *cfg,
						  const char *name)
{
	for (size_t i = 0; name && i < SBX_ARRAY_SIZE(runtimes); i++)
		if (strcmp(runtimes[i].name, name) == 0 &&
		    (!runtimes[i].test_only || cfg->execution_test_shell_runtime))
			return &runtimes[i];
	return NULL;
}

enum config_runner sandbox_execution_runner(const struct sandbox_config *cfg)
{
	if (cfg->execution_runner != CONFIG_RUNNER_AUTO)
		return cfg->execution_runner;
	if (cfg->mode == CONFIG_MODE_DEVELOPMENT && !cfg->libvirt_uri[0])
		return CONFIG_RUNNER_MOCK;
	return CONFIG_RUNNER_LIBVIRT;
}

int sandbox_execution_config_validate(const struct sandbox_config *cfg, struct sbx_error *err)
{
	enum config_runner r = cfg->execution_runner;
	bool prod = cfg->mode == CONFIG_MODE_PRODUCTION;

	if (r != CONFIG_RUNNER_AUTO && r != CONFIG_RUNNER_LIBVIRT &&
	    r != CONFIG_RUNNER_DEV_PROCESS && r != CONFIG_RUNNER_MOCK)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "execution_runner",
				     "execution_runner must be 'libvirt', 'dev-process' or 'mock'");
	if (prod && sandbox_execution_runner(cfg) != CONFIG_RUNNER_LIBVIRT)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "execution_runner",
				     "production mode refuses the '%s' runner (no isolation); "
				     "use 'libvirt'",
				     config_runner_name(sandbox_execution_runner(cfg)));
	if (prod && cfg->execution_test_shell_runtime)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "execution_test_shell_runtime",
				     "execution_test_shell_runtime is for tests; production "
				     "mode refuses it");
	if (cfg->execution_max_timeout_seconds < 1 || cfg->execution_max_timeout_seconds > 3600)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "execution_max_timeout_seconds",
				     "execution_max_timeout_seconds must be 1..3600");
	if (cfg->execution_price_micro_per_second > 1000000000)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "execution_price_micro_per_second",
				     "execution_price_micro_per_second must be <= 1e9");
	if (cfg->execution_max_code_bytes < 1 || cfg->execution_max_code_bytes > 512 * 1024)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "execution_max_code_bytes",
				     "execution_max_code_bytes must be 1..524288");
	if (cfg->execution_store_max_bytes < 4096 || cfg->execution_store_max_bytes > 16u << 20)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "execution_store_max_bytes",
				     "execution_store_max_bytes must be 4096..16777216");
	if (cfg->execution_store_account_max_bytes < cfg->execution_store_max_bytes)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST,
				     "execution_store_account_max_bytes",
				     "execution_store_account_max_bytes must be >= "
				     "execution_store_max_bytes");
	if (cfg->execution_retention_hours < 1 || cfg->execution_retention_hours > 24 * 366)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "execution_retention_hours",
				     "execution_retention_hours must be 1..8784");
	for (size_t i = 0; i < cfg->n_execution_pool; i++) {
		const struct sandbox_runtime *rt =
		    runtime_find(cfg, cfg->execution_pool[i].runtime);

		if (!rt || !rt->pool)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "execution_pool",
					     "execution_pool names runtime '%s'; it takes 'python' "
					     "and 'node'",
					     cfg->execution_pool[i].runtime);
		if (cfg->execution_pool[i].count < 0 ||
		    cfg->execution_pool[i].count > cfg->max_guests)
			return sbx_error_set(err, SBX_E_INVALID_REQUEST, "execution_pool",
					     "execution_pool counts must be 0..max_guests");
	}
	if (cfg->execution_size[0] && !sandbox_config_size(cfg, cfg->execution_size))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "execution_size",
				     "execution_size '%s' is not in the size table",
				     cfg->execution_size);
	return 0;
}

/* ------------------------------------------------------------ runners */

void sandbox_run_result_release(struct sandbox_run_result *r)
{
	free(r->out);
	free(r->errb);
	memset(r, 0, sizeof(*r));
}

/* libvirt: a fresh guest, counted for host capacity while it lives. */
static int guest_get(struct sandbox_svc *svc, const struct sandbox_size *size,
		     const struct sandbox_runtime *rt, const char *marker, struct fleet_guest **out,
		     bool *warm, bool *prestarted, struct sbx_error *err)
{
	int64_t deadline = sbx_mono_ms() + svc->cfg.boot_timeout_ms;
	/* placed like a sandbox (docs/hosts.md): an execution guest of this
	 * runtime, else a plain pooled guest, else a boot where there is room */
	struct fleet_acquire acq = {
	    .size = size,
	    .runtime = rt->pool ? rt->name : NULL,
	    .marker = marker,
	    .queue_deadline_mono = deadline,
	    .boot_deadline_mono = deadline,
	    .why_failed = "the execution could not start",
	};

	if (sandbox_acquire(svc, &acq, err) < 0) {
		if (acq.no_room) {
			sbx_error_set(err, SBX_E_SERVICE_UNAVAILABLE, NULL,
				      "no host has capacity for another execution right now; "
				      "retry later");
			err->retry_after_s = 10;
		}
		return -1;
	}
	*out = acq.g;
	*warm = acq.warm;
	*prestarted = acq.warm && acq.g->runtime[0];
	return 0;
}

/* Tear the guest down, then stop counting it for capacity. */
static void guest_put(struct sandbox_svc *svc, const struct sandbox_size *size,
		      struct fleet_guest *l)
{
	struct fleet_host *h = l->host;

	fleet_guest_teardown(l, "the execution is over");
	fleet_guest_uncount(svc->fleet, h, size);
}

struct guest_end {
	struct sandbox_svc *svc;
	const struct sandbox_size *size; /* in svc->cfg: lives as long as svc */
	struct fleet_guest *l;
};

/* A job of the blocking pool; cancelled or not, the teardown runs. */
static void guest_end_job(void *arg, bool cancelled)
{
	struct guest_end ge = *(struct guest_end *)arg;

	free(arg);
	guest_put(ge.svc, ge.size, ge.l);
}

/* The execution is over: the guest (unlinked from everything, never
 * reused) is torn down by the service's blocking pool, so the reply does
 * not wait for the domain destroy (1.2-1.8 s under TCG). It stays counted
 * for host capacity (its host's booting counters) until the teardown is
 * done; sandbox_svc_free() drains the pool. A crash meanwhile leaves a
 * domain whose metadata names the execution id, no sandbox row: the next
 * start's reconcile destroys it. When the pool refuses the job (full, or
 * stopping), tear down here. */
static void guest_put_background(struct sandbox_svc *svc, const struct sandbox_size *size,
				 struct fleet_guest *l)
{
	struct guest_end *ge = malloc(sizeof(*ge));

	if (ge) {
		*ge = (struct guest_end){.svc = svc, .size = size, .l = l};
		if (svc->work && sbx_workpool_submit(svc->work, guest_end_job, ge) == 0)
			return;
		free(ge);
	}
	guest_put(svc, size, l);
}

struct sync_call {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	struct agentless_exec_result res;
	struct sbx_error err;
	bool ok;
	int64_t done_mono; /* when the result (or failure) arrived */
};

static void sync_done(void *opaque, struct agentless_exec_result *res, const struct sbx_error *e)
{
	struct sync_call *sc = opaque;

	pthread_mutex_lock(&sc->lock);
	if (res) {
		sc->res = *res;
		memset(res, 0, sizeof(*res));
		sc->ok = true;
	} else {
		sc->err = *e;
	}
	sc->done = true;
	sc->done_mono = sbx_mono_ms();
	pthread_cond_broadcast(&sc->cond);
	pthread_mutex_unlock(&sc->lock);
}

/* ------------------------------------------------- the execution pool */

/* The launcher exec of an execution guest, started at pool time. */
struct prestart {
	struct sync_call sc; /* its completion (the exec's opaque) */
	const struct sandbox_runtime *rt;
	char dir[32]; /* /tmp/sbxr.<6 hex>, named by the host */
};

static const char *exec_user_of(const struct sandbox_config *cfg)
{
	return strcmp(cfg->exec_user, "root") == 0 ? NULL : cfg->exec_user;
}

int sandbox_execution_prestart(struct sandbox_svc *svc, struct fleet_guest *l, const char *runtime,
			       int64_t deadline_mono, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	const struct sandbox_runtime *rt = runtime_find(cfg, runtime);
	struct agentless_exec_result rr = {0};
	struct prestart *ps;
	char cmd[4096], ready[512];
	int64_t left;
	int rc;

	if (!rt || !rt->pool)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL,
				     "runtime '%s' has no execution pool", runtime);
	ps = calloc(1, sizeof(*ps));
	if (!ps)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	pthread_mutex_init(&ps->sc.lock, NULL);
	pthread_cond_init(&ps->sc.cond, NULL);
	ps->rt = rt;
	if (sbx_random_id("/tmp/sbxr.", 3, ps->dir, sizeof ps->dir) < 0) {
		sandbox_execution_prestart_free(ps);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "no randomness available");
	}
	snprintf(cmd, sizeof cmd, PRE_HEAD, ps->dir);
	if (runtime_command(rt, SANDBOX_RUNTIMES_DIR, true, cmd + strlen(cmd),
			    sizeof cmd - strlen(cmd)) < 0) {
		sandbox_execution_prestart_free(ps);
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "the %s launcher does not fit",
				     rt->name);
	}
	/* The guest's own timeout only has to outlast the pool's idle limit
	 * and the longest run: the host kills it at delivery + timeout
	 * (agentless_exec_set_deadline). Never ticked while pooled. */
	struct agentless_exec_req ar = {
	    .command = cmd,
	    .command_len = strlen(cmd),
	    .cwd = SANDBOX_EXEC_CWD,
	    .timeout_ms =
		(cfg->pool_max_idle_s + (uint32_t)cfg->execution_max_timeout_seconds) * 1000u +
		60000u,
	    .stdout_cap = (uint32_t)cfg->output_cap_bytes,
	    .stderr_cap = (uint32_t)cfg->output_cap_bytes,
	    .user = exec_user_of(cfg),
	};
	if (agentless_exec_start(l->conn, &ar, sync_done, &ps->sc, err) < 0) {
		sandbox_execution_prestart_free(ps);
		return -1;
	}
	/* from here the conn may write into ps: it belongs to l */
	l->prestart = ps;
	snprintf(l->runtime, sizeof l->runtime, "%s", rt->name);
	left = deadline_mono - sbx_mono_ms();
	snprintf(ready, sizeof ready, PRE_READY, ps->dir);
	struct agentless_exec_req rq = {
	    .command = ready,
	    .command_len = strlen(ready),
	    .cwd = SANDBOX_EXEC_CWD,
	    .timeout_ms = (uint32_t)SBX_MAX(left, (int64_t)1000),
	    .stdout_cap = 1024,
	    .stderr_cap = 1024,
	    /* root: /proc/<pid>/syscall needs ptrace access */
	};
	rc = agentless_exec(l->conn, &rq, &rr, err);
	if (rc == 0 && (rr.exit_code != 0 || !sandbox_execution_prestart_waiting(ps)))
		rc = sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
				   "the %s launcher did not wait for the code (exit %d)", rt->name,
				   rr.exit_code);
	agentless_exec_result_release(&rr);
	return rc;
}

bool sandbox_execution_prestart_waiting(struct prestart *ps)
{
	bool waiting;

	if (!ps)
		return false;
	pthread_mutex_lock(&ps->sc.lock);
	waiting = !ps->sc.done;
	pthread_mutex_unlock(&ps->sc.lock);
	return waiting;
}

void sandbox_execution_prestart_free(struct prestart *ps)
{
	if (!ps)
		return;
	if (ps->sc.ok)
		agentless_exec_result_release(&ps->sc.res);
	pthread_cond_destroy(&ps->sc.cond);
	pthread_mutex_destroy(&ps->sc.lock);
	free(ps);
}

/* Wait for sc's completion, ticking the conn (nobody else ticks an
 * execution guest) at least every 250 ms and at deadline_mono, when the
 * host's KILL is due. */
static void sync_wait(struct agentless_conn *conn, struct sync_call *sc, int64_t deadline_mono)
{
	pthread_mutex_lock(&sc->lock);
	while (!sc->done) {
		int64_t left = deadline_mono - sbx_mono_ms();
		struct timespec ts =
		    sbx_timespec_in(CLOCK_REALTIME, SBX_MAX(1, SBX_MIN(250, left)));

		pthread_cond_timedwait(&sc->cond, &sc->lock, &ts);
		if (!sc->done) {
			pthread_mutex_unlock(&sc->lock);
			agentless_conn_tick(conn, sbx_mono_ms());
			pthread_mutex_lock(&sc->lock);
		}
	}
	pthread_mutex_unlock(&sc->lock);
}

/* Send the code as main.EXT (FILE_PUT) and wake the interpreter (FILE_GET
 * of `go`), back to back: nothing in the guest starts a process, and the
 * guest takes the frames in order. The two transfers into x[0..1] (the
 * caller releases them once the launcher's result is in). -1 when a frame
 * could not be sent (channel down: the run then fails like a dead guest). */
static int deliver(struct sandbox_svc *svc, struct fleet_guest *l, const struct prestart *ps,
		   const struct sandbox_execution_req *req, struct agentless_xfer *x[2],
		   struct sbx_error *err)
{
	char main_path[64], go_path[64];
	struct agentless_file_req put = {
	    .op = SANDBOX_FILE_PUT,
	    .path = main_path,
	    .mode = 0644,
	    .user = exec_user_of(&svc->cfg),
	};
	struct agentless_file_req get = {.op = SANDBOX_FILE_GET, .path = go_path, .max_bytes = 1};
	size_t off = 0;

	snprintf(main_path, sizeof main_path, "%s/main.%s", ps->dir, ps->rt->ext);
	snprintf(go_path, sizeof go_path, "%s/go", ps->dir);
	if (agentless_xfer_start(l->conn, &put, NULL, NULL, &x[0], err) < 0)
		return -1;
	/* the code is at most 512 KiB, within the first window's credit */
	while (off < req->code_len) {
		long n = agentless_xfer_write(l->conn, x[0], req->code + off, req->code_len - off);

		if (n <= 0)
			return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
					     "the code could not be sent to the guest");
		off += (size_t)n;
	}
	if (agentless_xfer_end(l->conn, x[0]) < 0)
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
				     "the code could not be sent to the guest");
	return agentless_xfer_start(l->conn, &get, NULL, NULL, &x[1], err);
}

/* The warm path of an execution guest: deliver the code to the waiting
 * interpreter and take the launcher's result as the run's. Host time and
 * the timeout count from the delivery: the host KILLs the launcher at
 * delivery + timeout_ms. */
static int run_prestarted(struct sandbox_svc *svc, struct fleet_guest *l,
			  const struct sandbox_execution_req *req, uint32_t timeout_ms,
			  struct sandbox_run_result *res, struct sbx_error *err)
{
	struct prestart *ps = l->prestart;
	struct agentless_xfer *x[2] = {NULL, NULL};
	struct agentless_xfer_status st;
	int64_t t0 = sbx_mono_ms(), deadline = t0 + timeout_ms;
	int rc;

	/* no code sent yet: a launcher that is gone costs nothing */
	if (agentless_exec_set_deadline(l->conn, &ps->sc, deadline) < 0)
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL,
				     "the pre-started %s interpreter ended before the code arrived",
				     ps->rt->name);
	rc = deliver(svc, l, ps, req, x, err);
	res->t_delivered = sbx_mono_ms();
	if (rc == 0)
		sync_wait(l->conn, &ps->sc, deadline);
	res->t_result = sbx_mono_ms();
	/* the upload's outcome came before the EXIT (frames in order) */
	if (rc == 0 && x[0]) {
		agentless_xfer_status(x[0], &st);
		if (st.state == AGENTLESS_XFER_FAILED)
			sbx_warn(MOD, "the code could not be written in the guest: %s",
				 st.err.message);
	}
	agentless_xfer_release(x[0]);
	agentless_xfer_release(x[1]);
	if (rc < 0) {
		res->guest_failed = true;
		res->host_ms = (uint32_t)SBX_MIN(sbx_mono_ms() - t0, (int64_t)timeout_ms);
		return -1;
	}
	res->host_ms = (uint32_t)SBX_MIN(ps->sc.done_mono - t0, (int64_t)timeout_ms);
	if (!ps->sc.ok) {
		*err = ps->sc.err;
		res->guest_failed = true;
		return -1;
	}
	res->out = ps->sc.res.stdout_buf, res->out_len = ps->sc.res.stdout_len;
	res->errb = ps->sc.res.stderr_buf, res->err_len = ps->sc.res.stderr_len;
	res->out_total = ps->sc.res.stdout_total, res->err_total = ps->sc.res.stderr_total;
	res->exit_code = ps->sc.res.exit_code;
	/* the guest's figure covers the wait at pool time too */
	res->duration_ms = SBX_MIN(ps->sc.res.duration_ms, res->host_ms);
	res->timed_out = ps->sc.res.timed_out;
	memset(&ps->sc.res, 0, sizeof ps->sc.res); /* moved out */
	ps->sc.ok = false;
	return 0;
}

int sandbox_execution_run_cold(struct agentless_conn *conn, const struct agentless_exec_req *ar,
			       struct agentless_exec_result *out, uint32_t *host_ms, bool *billable,
			       struct sbx_error *err)
{
	struct sync_call sc = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
	int64_t t0 = sbx_mono_ms();

	*billable = false;
	*host_ms = 0;
	memset(out, 0, sizeof(*out));
	/* not sent: the guest never saw the code, the run costs nothing */
	if (agentless_exec_start(conn, ar, sync_done, &sc, err) < 0)
		return -1;
	/* the host backstop: nobody else ticks this guest's conn */
	sync_wait(conn, &sc, INT64_MAX);
	*billable = true;
	if (!sc.ok) {
		/* The code was delivered (it rides in the EXEC frame): whatever
		 * the guest answers (an ERROR of a kind it picks: BUSY, CWD,
		 * SPAWN...), dies, reboots or breaks the protocol, the run used
		 * the host's time until then. */
		*err = sc.err;
		*host_ms = (uint32_t)SBX_MIN(sc.done_mono - t0, (int64_t)ar->timeout_ms);
		return -1;
	}
	*out = sc.res;
	*host_ms = SBX_MIN(sc.res.host_ms, ar->timeout_ms);
	return 0;
}

static int run_libvirt(struct sandbox_svc *svc, const char *id, const struct sandbox_runtime *rt,
		       const char *launcher, const struct sandbox_execution_req *req,
		       uint32_t timeout_ms, size_t cap, struct sandbox_run_result *res, bool *warm,
		       bool *prestarted, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	const struct sandbox_size *size = sandbox_config_size(
	    cfg, cfg->execution_size[0] ? cfg->execution_size : cfg->default_size);
	struct agentless_exec_result out = {0};
	struct agentless_exec_req ar = {
	    .command = launcher,
	    .command_len = strlen(launcher),
	    .cwd = SANDBOX_EXEC_CWD,
	    .timeout_ms = timeout_ms,
	    .stdout_cap = (uint32_t)cap,
	    .stderr_cap = (uint32_t)cap,
	    .stdin_data = req->code,
	    .stdin_len = req->code_len,
	    /* the exec's user too (config exec_user) */
	    .user = exec_user_of(cfg),
	};
	struct fleet_guest *l;
	int rc;

	/* a. a guest of the execution size */
	if (!size)
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "no guest size configured");
	if (guest_get(svc, size, rt, id, &l, warm, prestarted, err) < 0)
		return -1;
	res->t_guest = sbx_mono_ms();
	/* b. pre-started: deliver to the waiting interpreter (c. then give
	 *    the guest back) */
	if (*prestarted) {
		rc = run_prestarted(svc, l, req, timeout_ms, res, err);

		guest_put_background(svc, size, l);
		if (rc < 0 && err->code != SBX_E_SERVICE_UNAVAILABLE)
			err->code = SBX_E_SANDBOX_ERROR;
		return rc;
	}
	/* b. cold: the launcher with the code on its stdin */
	res->t_delivered = sbx_mono_ms();
	rc = sandbox_execution_run_cold(l->conn, &ar, &out, &res->host_ms, &res->guest_failed, err);
	res->t_result = sbx_mono_ms();
	/* c. the guest given back, the result taken */
	guest_put_background(svc, size, l);
	if (rc < 0) {
		if (err->code != SBX_E_SERVICE_UNAVAILABLE)
			err->code = SBX_E_SANDBOX_ERROR;
		return -1;
	}
	res->out = out.stdout_buf, res->out_len = out.stdout_len;
	res->errb = out.stderr_buf, res->err_len = out.stderr_len;
	res->out_total = out.stdout_total, res->err_total = out.stderr_total;
	res->exit_code = out.exit_code;
	res->duration_ms = out.duration_ms;
	res->timed_out = out.timed_out;
	return 0;
}

/* ------------------------------------------------------------ the use case */

int sandbox_execution_check_req(const struct sandbox_config *cfg,
				const struct sandbox_execution_req *req,
				const struct sandbox_runtime **rt, struct sbx_error *err)
{
	if (!(*rt = runtime_find(cfg, req->runtime)))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "runtime",
				     "runtime must be 'python' or 'node'");
	if (req->timeout_seconds < 1 || req->timeout_seconds > cfg->execution_max_timeout_seconds)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "timeout_seconds",
				     "timeout_seconds must be 1..%d",
				     cfg->execution_max_timeout_seconds);
	if (!req->code || req->code_len == 0)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "code", "code is required");
	if (req->code_len > cfg->execution_max_code_bytes)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "code",
				     "code must be at most %zu bytes",
				     cfg->execution_max_code_bytes);
	if (memchr(req->code, '\0', req->code_len))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "code",
				     "code must not contain NUL bytes");
	/* json-c lets overlong forms, surrogates and F5..F7 lead bytes
	 * through; the receipt could not be made of them after the run */
	if (!receipt_utf8_valid(req->code, req->code_len))
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "code",
				     "code must be valid UTF-8 (RFC 3629)");
	return 0;
}

int sandbox_execution_check(struct sandbox_svc *svc, const struct sandbox_execution_req *req,
			    struct sbx_error *err)
{
	const struct sandbox_runtime *rt;

	return sandbox_execution_check_req(&svc->cfg, req, &rt, err);
}

/* Run the launcher with the code on stdin, on the configured runner. */
int sandbox_execution_runner_run(struct sandbox_svc *svc, const char *id,
				 const struct sandbox_runtime *rt,
				 const struct sandbox_execution_req *req,
				 struct sandbox_run_result *res, bool *warm, bool *prestarted,
				 struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	enum config_runner runner = sandbox_execution_runner(cfg);
	uint32_t timeout_ms = (uint32_t)req->timeout_seconds * 1000;
	char launcher[2048];
	int n;

	/* 1. the launcher; its bootstraps: the guest's copy, with no guest
	 *    the checkout's */
	n = snprintf(launcher, sizeof launcher, LAUNCH_HEAD, rt->ext);
	if (runtime_command(
		rt, runner == CONFIG_RUNNER_DEV_PROCESS ? SBX_REPO_RUNTIMES : SANDBOX_RUNTIMES_DIR,
		false, launcher + n, sizeof launcher - (size_t)n) < 0)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "the %s launcher does not fit",
				     rt->name);
	/* 2. the configured runner */
	if (runner == CONFIG_RUNNER_MOCK)
		return sandbox_run_mock(res) < 0
			   ? sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory")
			   : 0;
	if (runner == CONFIG_RUNNER_DEV_PROCESS)
		return sandbox_run_dev_process(launcher, req->code, req->code_len, timeout_ms,
					       cfg->output_cap_bytes, res, err);
	return run_libvirt(svc, id, rt, launcher, req, timeout_ms, cfg->output_cap_bytes, res, warm,
			   prestarted, err);
}

const char *sandbox_runtime_name(const struct sandbox_runtime *rt)
{
	return rt->name;
}
