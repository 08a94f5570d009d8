/* Pause and resume (issue 29) in a real guest of the full image: one
 * daemon, one sandbox shared by the cases, in order.
 *
 *  1. a file written and a background process started before a pause of
 *     PAUSE_S seconds are there after resume, and the process keeps writing
 *     to its ring; the guest's `date` is within 3 s of the host's (a guest
 *     whose clock is not set at resume lags by the whole pause); exec,
 *     files and processes answer 409 sandbox_paused while paused; another
 *     account gets 404 on pause and resume; pause of a paused and resume of
 *     a running sandbox answer 200 with the object; two terminals open at
 *     the pause (`sbx shell` running `sleep 4343`) end, told it was paused,
 *     and their shells are not in the guest after the resume, nor their
 *     PTYs (a guest that kept them would run out of PTYs after a few
 *     pauses);
 *  2. billing: the sandbox's charge is its running time only (the ledger's
 *     one charge equals the runtime without the pause at its price), the
 *     cost so far does not move while paused, the save file is 0600 beside
 *     the overlay and gone after resume; the ledger invariants hold;
 *  3. a daemon restart (kill -9) while paused keeps it paused, with no
 *     domain, and resumable: the process is still there after;
 *  3c. refused before the save: a pause whose storage the account cannot
 *     hold answers 402 without saving (the fault point after the save is
 *     never reached); past pause_jobs_per_host a resume answers 429; a
 *     save past pause_timeout_ms is aborted (503, still running, no save
 *     file), a restore past it ends the sandbox failed (ledger holds);
 *  4. DELETE of a paused sandbox settles it and deletes its files; pause
 *     and resume of the ended sandbox answer 410.
 *
 * Pause and resume times and the save-file size are printed (figures,
 * not assertions). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cmocka.h>

#include "billing/billing.h"
#include "harness.h"

static struct daemon d;
static char other_key[128];
static char sbx[64];
static long bg_pid;
/* Bounds of the time the sandbox was paused, from the test's side: each
 * pause began after the pause request was sent and before its answer,
 * ended after the resume request was sent and before its answer. */
static int64_t paused_min_ms, paused_max_ms;
static int64_t pause_sent, pause_answered;

#define PRICE 90000 /* µ$/h of the size below */
/* How long case 1 keeps the sandbox paused: 10 s here: more than the 3 s the clock may be off, so a
 * guest whose clock is not set at resume fails; SBX_TEST_PAUSE_S for a longer one
 * (docs/lifecycle.md gives a 2-minute run). */
static int pause_s(void)
{
	const char *e = getenv("SBX_TEST_PAUSE_S");

	return e && atoi(e) > 0 ? atoi(e) : 10;
}
#define PAUSE_S pause_s()

static struct http_reply req_on(const char *id, const char *key, const char *method,
				const char *suffix, const char *body)
{
	struct http_reply r;
	char path[256];

	snprintf(path, sizeof(path), "/v1/sandboxes/%s%s", id, suffix);
	if (http_request(&d, method, path, key, NULL, body, 0, &r) < 0)
		fail_msg("no answer to %s %s", method, path);
	return r;
}

static struct http_reply req(const char *key, const char *method, const char *suffix,
			     const char *body)
{
	return req_on(sbx, key, method, suffix, body);
}

static struct http_reply exec_cmd(const char *cmd)
{
	json_object *o = json_object_new_object();
	struct http_reply r;

	json_object_object_add(o, "command", json_object_new_string(cmd));
	r = req(d.key, "POST", "/exec", json_object_to_json_string(o));
	json_object_put(o);
	return r;
}

/* stdout of a command that must succeed (owned by r: use before freeing) */
static struct http_reply exec_ok(const char *cmd)
{
	struct http_reply r = exec_cmd(cmd);

	if (r.status != 200 || jint(r.json, "exit_code") != 0)
		print_message("exec '%s': %d %s\n", cmd, r.status, r.body);
	assert_int_equal(r.status, 200);
	assert_int_equal(jint(r.json, "exit_code"), 0);
	return r;
}

#define BASE_CFG                                                                                   \
	"\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 512, \"disk_gib\": 2, "             \
	"\"price_micro_usd_per_hour\": 90000}}, \"http_threads\": 2, \"destroy_on_exit\": true, "  \
	"\"transport\": \"socket\""

static int setup(void **state)
{
	(void)state;
	memset(&d, 0, sizeof(d));
	if (daemon_up_full_second_account(&d, "test_pause", BASE_CFG, "other", "10", other_key,
					  sizeof(other_key)) < 0)
		return -1;
	return daemon_create_sandbox(&d, sbx, sizeof(sbx));
}

static int teardown(void **state)
{
	(void)state;
	return daemon_down(&d);
}

/* The domain of the sandbox (from the database). */
static void domain_of(char *out, size_t n)
{
	assert_int_equal(
	    daemon_db_text(&d, "SELECT domain FROM sandboxes WHERE id = ?1", sbx, out, n), 0);
	assert_true(out[0] != '\0');
}

static struct http_reply pause_or_resume(const char *what, int64_t *took_ms)
{
	int64_t t0 = sbx_mono_ms(), w0 = sbx_wall_ms();
	struct http_reply r = req(d.key, "POST", what, NULL);
	int64_t w1 = sbx_wall_ms();

	if (r.status == 200 && strcmp(what, "/pause") == 0 && r.json &&
	    strcmp(jstr(r.json, "status"), "paused") == 0 && !pause_sent) {
		pause_sent = w0;
		pause_answered = w1;
	} else if (r.status == 200 && strcmp(what, "/resume") == 0 && pause_sent) {
		paused_min_ms += w0 - pause_answered;
		paused_max_ms += w1 - pause_sent;
		pause_sent = 0;
	}

	if (took_ms)
		*took_ms = sbx_mono_ms() - t0;
	if (r.status != 200)
		print_message("%s: %d %s\n", what, r.status, r.body);
	return r;
}

/* The shell command running `sbx ARGS` against the daemon (bin/sbx beside
 * SBX_BIN), under `wrap` ("" or e.g. "timeout 120 "), then `tail`
 * (redirections), into cmd. */
static void sbx_command(char *cmd, size_t len, const char *wrap, const char *args, const char *tail)
{
	const char *bin = sbx_bin(), *slash = strrchr(bin, '/');

	snprintf(cmd, len,
		 "SANDBOXD_URL=http://127.0.0.1:%d SANDBOXD_KEY='%s' XDG_CONFIG_HOME=/nonexistent "
		 "%s%.*s/sbx %s %s",
		 d.port, d.key, wrap, slash ? (int)(slash - bin) : 3, slash ? bin : "bin", args,
		 tail);
}

/* `sbx ARGS`: its stdout into out, its exit code. */
static int sbx_cli(const char *args, char *out, size_t n)
{
	char cmd[1024];

	sbx_command(cmd, sizeof(cmd), "", args, "</dev/null 2>&1");
	return cmd_out(cmd, out, n);
}

/* A terminal (`sbx shell`, bounded by `timeout`) typing `line`, its stdin
 * left open, its output into the file `out`. */
static FILE *terminal_open(const char *line, const char *out)
{
	char args[128], tail[640], cmd[1024];
	FILE *p;

	snprintf(args, sizeof(args), "shell %s", sbx);
	snprintf(tail, sizeof(tail), ">%s 2>&1", out);
	sbx_command(cmd, sizeof(cmd), "timeout 120 ", args, tail);
	p = popen(cmd, "w");
	assert_non_null(p);
	fputs(line, p);
	fflush(p);
	return p;
}

/* A number the guest prints for `cmd`. */
static int guest_count(const char *cmd)
{
	struct http_reply r = exec_ok(cmd);
	int n = atoi(jstr(r.json, "stdout"));

	http_reply_free(&r);
	return n;
}

#define SLEEPS "ps -eo args | grep -c '^sleep 4343' || true"
#define PTS    "ls /dev/pts | grep -c '^[0-9]' || true"

/* Case 1's two terminals, open at its pause: the `sbx shell`s, their
 * output files, and the guest's PTYs in use before them. */
static FILE *term[2];
static char term_out[2][300];
static int pts_before;

/* Open both, each running a `sleep 4343`; wait until the guest runs them. */
static void terminals_start(void)
{
	pts_before = guest_count(PTS);
	for (int i = 0; i < 2; i++) {
		snprintf(term_out[i], sizeof(term_out[i]), "%s/terminal-%d.out", d.state_dir, i);
		term[i] = terminal_open("sleep 4343\n", term_out[i]);
	}
	for (int i = 0; i < 300 && guest_count(SLEEPS) < 2; i++)
		usleep(200 * 1000);
	assert_int_equal(guest_count(SLEEPS), 2);
	assert_int_equal(guest_count(PTS), pts_before + 2);
}

/* After the pause: both ended (not by `timeout`), told it was paused. */
static void terminals_ended_by_the_pause(void)
{
	for (int i = 0; i < 2; i++) {
		int ps = pclose(term[i]);
		char out[4096] = "", cmd[700];

		snprintf(cmd, sizeof(cmd), "tail -c 400 %s", term_out[i]);
		cmd_out(cmd, out, sizeof(out));
		print_message("terminal %d at the pause: exit %d: %s\n", i, WEXITSTATUS(ps), out);
		assert_true(WIFEXITED(ps) && WEXITSTATUS(ps) != 0 && WEXITSTATUS(ps) != 124);
		assert_non_null(strstr(out, "was paused"));
	}
}

/* After the resume: their shells were hung up before the save, so none
 * came back with the guest, nor their PTYs (64 per guest). */
static void terminals_gone_after_the_resume(void)
{
	assert_int_equal(guest_count(SLEEPS), 0);
	assert_int_equal(guest_count(PTS), pts_before);
}

/* ------------------------------------------------------------- 1. */

static void state_survives_a_pause(void **state)
{
	struct http_reply r;
	char suffix[128], dom[64], path[512], line[64];
	int64_t pause_ms, resume_ms, cost_paused;
	long long host_now, guest_now;
	struct stat st;

	(void)state;
	r = exec_ok("echo kept-through-pause > /root/pause-file && sync");
	http_reply_free(&r);
	/* a background process that ticks every 200 ms */
	r = req(d.key, "POST", "/processes",
		"{\"command\": \"i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; "
		"done\"}");
	assert_int_equal(r.status, 201);
	bg_pid = (long)jint(r.json, "pid");
	http_reply_free(&r);
	terminals_start();
	sleep(2);

	/* another account: 404 on both */
	r = req(other_key, "POST", "/pause", NULL);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
	r = req(other_key, "POST", "/resume", NULL);
	assert_int_equal(r.status, 404);
	http_reply_free(&r);
	/* resume of a running one: 200, unchanged */
	r = pause_or_resume("/resume", NULL);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "running");
	http_reply_free(&r);

	r = pause_or_resume("/pause", &pause_ms);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "paused");
	assert_non_null(jstr(r.json, "paused_at"));
	print_message("pause: %lld ms, %lld bytes saved (save file + overlay)\n",
		      (long long)pause_ms, (long long)jint(r.json, "paused_bytes"));
	assert_true(jint(r.json, "paused_bytes") > 0);
	http_reply_free(&r);
	terminals_ended_by_the_pause();

	/* the domain is gone, its save file is there, 0600 */
	domain_of(dom, sizeof(dom));
	assert_int_equal(list_own_domains(&d, true, NULL, 0), 0);
	snprintf(path, sizeof(path), "%s/run/%s.save", d.state_dir, dom);
	if (stat(path, &st) < 0) {
		snprintf(path, sizeof(path), "find %s -name '%s.save' | head -1", d.state_dir, dom);
		cmd_out(path, line, sizeof(line));
		print_message("save file not in run/: %s\n", line);
	}
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	print_message("save file: %lld bytes allocated\n", (long long)st.st_blocks * 512);

	/* paused: a second pause answers 200 with the object */
	r = pause_or_resume("/pause", NULL);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "paused");
	http_reply_free(&r);
	/* exec, files, processes: 409 sandbox_paused */
	r = exec_cmd("true");
	assert_int_equal(r.status, 409);
	assert_string_equal(jerr(r.json, "type"), "sandbox_paused");
	http_reply_free(&r);
	r = req(d.key, "GET", "/files?path=/root/pause-file", NULL);
	assert_int_equal(r.status, 409);
	http_reply_free(&r);
	snprintf(suffix, sizeof(suffix), "/processes/%ld/output?stdout_offset=0", bg_pid);
	r = req(d.key, "GET", suffix, NULL);
	assert_int_equal(r.status, 409);
	http_reply_free(&r);
	r = req(d.key, "GET", "", NULL);
	cost_paused = jint(r.json, "cost_micro_usd");
	http_reply_free(&r);
	/* the list's status filter: under paused, not under running */
	assert_int_equal(
	    http_request(&d, "GET", "/v1/sandboxes?status=paused", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, sbx));
	http_reply_free(&r);
	assert_int_equal(
	    http_request(&d, "GET", "/v1/sandboxes?status=running", d.key, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_null(strstr(r.body, sbx));
	http_reply_free(&r);

	sleep(PAUSE_S);
	/* the cost does not move while paused (storage is free here) */
	r = req(d.key, "GET", "", NULL);
	assert_string_equal(jstr(r.json, "status"), "paused");
	assert_int_equal(jint(r.json, "cost_micro_usd"), cost_paused);
	http_reply_free(&r);

	r = pause_or_resume("/resume", &resume_ms);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "running");
	assert_true(jis_null(r.json, "paused_at"));
	assert_true(jint(r.json, "paused_seconds") >= PAUSE_S);
	print_message("resume: %lld ms after %lld s paused\n", (long long)resume_ms,
		      (long long)jint(r.json, "paused_seconds"));
	http_reply_free(&r);
	assert_int_equal(stat(path, &st), -1); /* the save file went */

	terminals_gone_after_the_resume();

	/* the file, the clock */
	r = exec_ok("cat /root/pause-file; date +%s");
	host_now = (long long)time(NULL);
	assert_non_null(strstr(jstr(r.json, "stdout"), "kept-through-pause\n"));
	guest_now = atoll(strchr(jstr(r.json, "stdout"), '\n') + 1);
	print_message("guest clock after resume: %+lld s from the host's\n", guest_now - host_now);
	assert_true(llabs(guest_now - host_now) <= 3);
	http_reply_free(&r);

	/* the process is running and keeps writing to its ring */
	r = req(d.key, "GET", suffix, NULL);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "running");
	assert_non_null(strstr(jstr(r.json, "stdout"), "tick 0\ntick 1\n"));
	size_t before = strlen(jstr(r.json, "stdout"));
	http_reply_free(&r);
	sleep(2);
	r = req(d.key, "GET", suffix, NULL);
	assert_int_equal(r.status, 200);
	assert_true(strlen(jstr(r.json, "stdout")) > before + 20);
	http_reply_free(&r);
}

/* ------------------------------------------------------------- 2. */

static void runtime_billed_only_while_running(void **state)
{
	struct http_reply r;
	char buf[64];
	struct sbx_error err;
	int64_t paused_ms, created, cost, runtime_ms, now;

	(void)state;
	/* the pause's time is in the row once, within what the test saw */
	assert_int_equal(daemon_db_text(&d, "SELECT paused_ms FROM sandboxes WHERE id = ?1", sbx,
					buf, sizeof(buf)),
			 0);
	paused_ms = atoll(buf);
	print_message("paused_ms %lld, seen between %lld and %lld\n", (long long)paused_ms,
		      (long long)paused_min_ms, (long long)paused_max_ms);
	assert_true(paused_ms >= paused_min_ms && paused_ms <= paused_max_ms);
	assert_int_equal(daemon_db_text(&d, "SELECT created_at_ms FROM sandboxes WHERE id = ?1",
					sbx, buf, sizeof(buf)),
			 0);
	created = atoll(buf);
	/* the cost so far is the running time's only: between the cost of
	 * the runtime before and after the GET */
	int64_t lo = sbx_wall_ms();
	r = req(d.key, "GET", "", NULL);
	now = sbx_wall_ms();
	assert_int_equal(r.status, 200);
	cost = jint(r.json, "cost_micro_usd");
	http_reply_free(&r);
	runtime_ms = now - created - paused_ms;
	print_message("cost so far %lld µ$ for ~%lld ms running (%lld ms since created)\n",
		      (long long)cost, (long long)runtime_ms, (long long)(now - created));
	assert_true(cost >= billing_cost(lo - created - paused_ms, PRICE));
	assert_true(cost <= billing_cost(runtime_ms, PRICE));
	/* and less than the whole span would cost: the pause is not billed */
	assert_true(cost < billing_cost(lo - created, PRICE));
	assert_int_equal(daemon_ledger_check(&d, &err), 0);
}

/* ------------------------------------------------------------- 3. */

static void a_restart_keeps_it_paused(void **state)
{
	struct http_reply r;
	char suffix[128], st[32], args[128], out[512];

	(void)state;
	/* through the CLI this time */
	snprintf(args, sizeof(args), "pause %s", sbx);
	assert_int_equal(sbx_cli(args, out, sizeof(out)), 0);
	print_message("sbx %s: %s\n", args, out);
	assert_non_null(strstr(out, " paused since "));
	daemon_kill9(&d);
	assert_int_equal(daemon_start(&d), 0);
	assert_int_equal(daemon_sandbox_status(&d, sbx, st, sizeof(st)), 200);
	assert_string_equal(st, "paused");
	assert_int_equal(list_own_domains(&d, true, NULL, 0), 0);
	snprintf(args, sizeof(args), "resume %s", sbx);
	assert_int_equal(sbx_cli(args, out, sizeof(out)), 0);
	print_message("sbx %s: %s\n", args, out);
	assert_non_null(strstr(out, " running, expires at "));
	snprintf(suffix, sizeof(suffix), "/processes/%ld/output?stdout_offset=0", bg_pid);
	r = req(d.key, "GET", suffix, NULL);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "running");
	http_reply_free(&r);
	r = exec_ok("cat /root/pause-file");
	assert_non_null(strstr(jstr(r.json, "stdout"), "kept-through-pause"));
	http_reply_free(&r);
}

/* ------------------------------------------------------------- 3b. */

/* Rewrite the config as BASE_CFG plus `more` (JSON members after a
 * comma, "" = none) and start. */
static void start_with(const char *more)
{
	char extra[1024];

	snprintf(extra, sizeof(extra), "%s%s%s", BASE_CFG, more[0] ? ", " : "", more);
	assert_int_equal(daemon_config_full(&d, extra), 0);
	assert_int_equal(daemon_start(&d), 0);
}

/* The same with test_fault_point `fault` ("" = none). */
static void start_with_fault(const char *fault)
{
	char more[256] = "";

	if (fault[0])
		snprintf(more, sizeof(more), "\"test_fault_point\": \"%s\"", fault);
	start_with(more);
}

/* POST .../what under test_fault_point `fault`: the daemon dies at the
 * point (exit 137, no answer), then starts again without it. */
static void die_at(const char *fault, const char *what)
{
	struct http_reply r;
	char path[128];
	int st = -1;

	daemon_kill9(&d); /* not SIGTERM: destroy_on_exit would end it */
	start_with_fault(fault);
	snprintf(path, sizeof(path), "/v1/sandboxes/%s%s", sbx, what);
	if (http_request(&d, "POST", path, d.key, NULL, NULL, 0, &r) == 0) {
		print_message("%s answered %d %s\n", what, r.status, r.body);
		http_reply_free(&r);
		fail();
	}
	for (int i = 0; i < 500 && d.pid > 0; i++) {
		if (waitpid(d.pid, &st, WNOHANG) == d.pid) {
			d.pid = 0;
			break;
		}
		usleep(20000);
	}
	assert_int_equal(d.pid, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 137);
	start_with_fault("");
}

/* A daemon killed between the save and its row (pause.after_save) and
 * between the restore and its row (resume.after_restore) restarts into
 * one consistent state: paused with no domain, then running with its
 * domain; billed once each way (the row's paused time grows once; the
 * ledger checks). */
static void a_crash_mid_pause_or_resume_is_consistent(void **state)
{
	struct http_reply r;
	char st[32], buf[64], suffix[128];
	struct sbx_error err;
	int64_t paused_before, paused_after;

	(void)state;
	assert_int_equal(daemon_db_text(&d, "SELECT paused_ms FROM sandboxes WHERE id = ?1", sbx,
					buf, sizeof(buf)),
			 0);
	paused_before = atoll(buf);
	die_at("pause.after_save", "/pause");
	/* the domain was saved, the row said running: paused now, at its
	 * last answer */
	assert_int_equal(daemon_sandbox_status(&d, sbx, st, sizeof(st)), 200);
	assert_string_equal(st, "paused");
	assert_int_equal(list_own_domains(&d, true, NULL, 0), 0);
	assert_int_equal(daemon_ledger_check(&d, &err), 0);

	die_at("resume.after_restore", "/resume");
	/* the domain was restored, the row said paused: resumed at the
	 * restart and reattached */
	assert_int_equal(daemon_sandbox_status(&d, sbx, st, sizeof(st)), 200);
	assert_string_equal(st, "running");
	assert_int_equal(list_own_domains(&d, false, NULL, 0), 1);
	assert_int_equal(daemon_ledger_check(&d, &err), 0);
	assert_int_equal(daemon_db_text(&d, "SELECT paused_ms FROM sandboxes WHERE id = ?1", sbx,
					buf, sizeof(buf)),
			 0);
	paused_after = atoll(buf);
	print_message("paused_ms %lld -> %lld\n", (long long)paused_before,
		      (long long)paused_after);
	assert_true(paused_after > paused_before);
	/* the guest answers, its process still runs */
	snprintf(suffix, sizeof(suffix), "/processes/%ld/output?stdout_offset=0", bg_pid);
	for (int i = 0; i < 50; i++) {
		r = req(d.key, "GET", suffix, NULL);
		if (r.status == 200)
			break;
		http_reply_free(&r);
		usleep(200 * 1000);
	}
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "running");
	http_reply_free(&r);
	r = exec_ok("cat /root/pause-file");
	assert_non_null(strstr(jstr(r.json, "stdout"), "kept-through-pause"));
	http_reply_free(&r);
}

/* ------------------------------------------------------------- 3c. */

/* The save file of sandbox `id` exists? */
static bool save_file_of(const char *id)
{
	char dom[64], path[512];
	struct stat st;

	assert_int_equal(
	    daemon_db_text(&d, "SELECT domain FROM sandboxes WHERE id = ?1", id, dom, sizeof(dom)),
	    0);
	snprintf(path, sizeof(path), "%s/run/%s.save", d.state_dir, dom);
	return stat(path, &st) == 0;
}

struct bg_pause {
	pthread_t t;
	int status;
	char type[64];
};

static void *bg_pause_main(void *arg)
{
	struct bg_pause *b = arg;
	struct http_reply r = req(d.key, "POST", "/pause", NULL);

	b->status = r.status;
	snprintf(b->type, sizeof(b->type), "%s", r.json ? jerr(r.json, "type") : "");
	http_reply_free(&r);
	return NULL;
}

/* Fill BLOAT_MB of sandbox `id`'s memory with non-zero bytes (a
 * background process that keeps them): its restore then reads that much
 * more (1.2 s or more here), well past a 300 ms deadline. */
#define BLOAT_MB 150
static void bloat(const char *id)
{
	char body[256], suffix[128];
	struct http_reply r;
	long pid;
	int i;

	snprintf(body, sizeof(body),
		 "{\"command\": \"python3 -c \\\"import time; b = bytearray(b'x') * %d000000; "
		 "print('ready', flush=True); time.sleep(100000)\\\"\"}",
		 BLOAT_MB);
	r = req_on(id, d.key, "POST", "/processes", body);
	assert_int_equal(r.status, 201);
	pid = (long)jint(r.json, "pid");
	http_reply_free(&r);
	snprintf(suffix, sizeof(suffix), "/processes/%ld/output?stdout_offset=0", pid);
	for (i = 0; i < 600; i++) {
		r = req_on(id, d.key, "GET", suffix, NULL);
		bool ready = r.status == 200 && strstr(jstr(r.json, "stdout"), "ready");
		http_reply_free(&r);
		if (ready)
			break;
		usleep(200 * 1000);
	}
	assert_true(i < 600);
}

/* The sandbox after a pause that did not happen: no save file, running
 * and answering, its file there. */
static void still_running_unsaved(void)
{
	struct http_reply r;
	char st[32];

	assert_false(save_file_of(sbx));
	assert_int_equal(daemon_sandbox_status(&d, sbx, st, sizeof(st)), 200);
	assert_string_equal(st, "running");
	r = exec_ok("cat /root/pause-file");
	assert_non_null(strstr(jstr(r.json, "stdout"), "kept-through-pause"));
	http_reply_free(&r);
}

/* Restarted with `more` in its config, the daemon refuses a pause of the
 * running sandbox before its save: `status` and `type`; no save file, and
 * the sandbox still running and answering, its file there. */
static void pause_refused_under(const char *more, int status, const char *type)
{
	struct http_reply r;

	daemon_kill9(&d);
	start_with(more);
	r = req(d.key, "POST", "/pause", NULL);
	print_message("pause refused: %d %s\n", r.status, r.body);
	assert_int_equal(r.status, status);
	assert_string_equal(jerr(r.json, "type"), type);
	http_reply_free(&r);
	still_running_unsaved();
}

/* The sandbox (running) is the one refused; `other` a second one, paused
 * normally first, whose resume meets the host cap and then the deadline. */
static void refused_before_the_save_and_deadlines(void **state)
{
	char other[64], st[32];
	struct http_reply r;
	struct sbx_error err;
	struct bg_pause b = {0};
	int i;

	(void)state;
	assert_int_equal(daemon_create_sandbox(&d, other, sizeof(other)), 0);
	bloat(other);
	r = req_on(other, d.key, "POST", "/pause", NULL);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);

	/* storage the account ($10) cannot hold: 402 before any save (a save
	 * would reach pause.after_save and kill the daemon: no answer) */
	pause_refused_under("\"paused_storage_micro_per_gib_hour\": 1000000000, "
			    "\"test_fault_point\": \"pause.after_save\"",
			    402, "insufficient_credit");

	/* one save or restore per host at a time, 300 ms each at most; the
	 * first save waits 5 s before it starts (pause.before_save), its
	 * guest out of the lives and the host's slot held */
	daemon_kill9(&d);
	start_with("\"pause_jobs_per_host\": 1, \"pause_timeout_ms\": 300, "
		   "\"test_fault_point\": \"pause.before_save\", \"test_fault_pause_ms\": 5000");
	assert_int_equal(daemon_sandbox_status(&d, other, st, sizeof(st)), 200);
	assert_string_equal(st, "paused");
	assert_int_equal(pthread_create(&b.t, NULL, bg_pause_main, &b), 0);
	for (i = 0; i < 150; i++) { /* the pause took the guest: 409 */
		r = exec_cmd("true");
		int s = r.status;
		http_reply_free(&r);
		if (s == 409)
			break;
		usleep(100 * 1000);
	}
	assert_true(i < 150);
	r = req_on(other, d.key, "POST", "/resume", NULL);
	print_message("resume while the host's one slot is taken: %d %s\n", r.status, r.body);
	assert_int_equal(r.status, 429);
	assert_string_equal(jerr(r.json, "type"), "rate_limited");
	http_reply_free(&r);
	pthread_join(b.t, NULL);
	print_message("pause past pause_timeout_ms: %d %s\n", b.status, b.type);
	bool late = b.status == 200;
	if (!late) {
		/* aborted: still running, answering, nothing saved or billed */
		assert_int_equal(b.status, 503);
		still_running_unsaved();
	} else {
		/* libvirt finished the save although aborted (the abort came
		 * outside QEMU's migration to the file: libvirt accepts it and
		 * goes on, or holds it until the save's end): a pause, late
		 * but done, and nothing else */
		print_message("the save finished past its deadline: a pause, late\n");
		assert_true(save_file_of(sbx));
		assert_int_equal(daemon_sandbox_status(&d, sbx, st, sizeof(st)), 200);
		assert_string_equal(st, "paused");
	}

	/* a restore past its deadline: the sandbox ends failed */
	r = req_on(other, d.key, "POST", "/resume", NULL);
	print_message("resume past pause_timeout_ms: %d %s\n", r.status, r.body);
	assert_int_equal(r.status, 500);
	http_reply_free(&r);
	assert_int_equal(daemon_sandbox_status(&d, other, st, sizeof(st)), 200);
	assert_string_equal(st, "failed");
	assert_false(save_file_of(other));
	assert_int_equal(daemon_ledger_check(&d, &err), 0);

	daemon_kill9(&d);
	start_with_fault("");
	if (late) { /* running again for the next case (no 300 ms deadline now) */
		r = req(d.key, "POST", "/resume", NULL);
		assert_int_equal(r.status, 200);
		http_reply_free(&r);
	}
}

/* A disk without room for the save (the disk rule, docs/configuration.md
 * "Disk": min_free_disk_mib is kept for the ledger beside the guests'
 * disks): 507 before anything is written; the sandbox runs on, billed as
 * before. min_free_disk_mib is set so that the guest's 2 GiB disk fits
 * with 100 MiB to spare, and its save (512 MiB of memory) does not. */
static void no_room_for_the_save_refuses_the_pause(void **state)
{
	struct statvfs sv;
	char more[128];
	struct sbx_error err;

	(void)state;
	assert_int_equal(statvfs(d.state_dir, &sv), 0);
	long long free_mib = (long long)((uint64_t)sv.f_bavail * sv.f_frsize >> 20);
	assert_true(free_mib > 2048 + 100);
	snprintf(more, sizeof(more), "\"min_free_disk_mib\": %lld", free_mib - 2048 - 100);
	pause_refused_under(more, 507, "insufficient_storage");
	assert_int_equal(daemon_ledger_check(&d, &err), 0);
	daemon_kill9(&d);
	start_with_fault("");
}

/* ------------------------------------------------------------- 4. */

static void delete_of_a_paused_sandbox_settles(void **state)
{
	struct http_reply r;
	char dom[64], cmd[512], out[64];
	struct sbx_error err;

	(void)state;
	domain_of(dom, sizeof(dom));
	r = pause_or_resume("/pause", NULL);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	r = req(d.key, "DELETE", "", NULL);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "destroyed");
	http_reply_free(&r);
	snprintf(cmd, sizeof(cmd), "find %s -name '%s.*' | wc -l", d.state_dir, dom);
	assert_int_equal(cmd_out(cmd, out, sizeof(out)), 0);
	assert_int_equal(atoi(out), 0);
	assert_int_equal(daemon_ledger_check(&d, &err), 0);
	r = req(d.key, "POST", "/resume", NULL);
	assert_int_equal(r.status, 410);
	assert_string_equal(jerr(r.json, "type"), "sandbox_not_running");
	http_reply_free(&r);
	r = req(d.key, "POST", "/pause", NULL);
	assert_int_equal(r.status, 410);
	assert_string_equal(jerr(r.json, "type"), "sandbox_not_running");
	http_reply_free(&r);

	/* the one charge is the runtime without any pause: billing stopped at
	 * the last pause (it never resumed) and each resumed pause's time is
	 * out of it, once */
	char q[512];
	int64_t created, paused_at, paused_ms, charge, n;

	assert_int_equal(
	    daemon_db_text(&d,
			   "SELECT created_at_ms || ' ' || paused_at_ms || ' ' || "
			   "paused_ms || ' ' || charge_micro FROM sandboxes WHERE id = ?1",
			   sbx, q, sizeof(q)),
	    0);
	assert_int_equal(sscanf(q, "%" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64, &created,
				&paused_at, &paused_ms, &charge),
			 4);
	assert_int_equal(daemon_db_text(&d,
					"SELECT COUNT(*) || ' ' || SUM(amount_micro) FROM ledger "
					"WHERE sandbox_id = ?1 AND kind = 'charge'",
					sbx, q, sizeof(q)),
			 0);
	int64_t sum = 0;
	assert_int_equal(sscanf(q, "%" SCNd64 " %" SCNd64, &n, &sum), 2);
	assert_int_equal(n, 1);
	assert_int_equal(sum, charge);
	assert_true(paused_at > created);
	print_message("charged %lld µ$ for %lld ms running (%lld ms paused before the last "
		      "pause)\n",
		      (long long)charge, (long long)(paused_at - created - paused_ms),
		      (long long)paused_ms);
	assert_int_equal(charge, billing_cost(paused_at - created - paused_ms, PRICE));
}

/* ------------------------------------------------------------- 5. */

/* A sandbox paused longer than paused_ttl_minutes ends (expired at its
 * pause + the retention) and its files go; a "minute" is 1 s here
 * (test_minute_ms), the retention 3 of them. */
static void paused_retention_ends_it(void **state)
{
	char dom[64], cmd[512], out[64], st[32];
	struct http_reply r;
	struct sbx_error err;
	int i;

	(void)state;
	daemon_kill9(&d);
	start_with("\"test_minute_ms\": 1000, \"paused_ttl_minutes\": 3");
	http_request(&d, "GET", "/v1/limits", NULL, NULL, NULL, 0, &r);
	assert_int_equal(jint(r.json, "paused_ttl_minutes"), 3);
	assert_string_equal(jstr(r.json, "paused_storage_usd_per_gib_hour"), "0.000000");
	http_reply_free(&r);
	assert_int_equal(daemon_create_sandbox_as(&d, d.key, 600, sbx, sizeof(sbx)), 0);
	domain_of(dom, sizeof(dom));
	r = pause_or_resume("/pause", NULL);
	assert_int_equal(r.status, 200);
	int64_t paused_at = sbx_wall_ms();
	http_reply_free(&r);
	for (i = 0; i < 100; i++) {
		assert_int_equal(daemon_sandbox_status(&d, sbx, st, sizeof(st)), 200);
		if (strcmp(st, "paused") != 0)
			break;
		usleep(200 * 1000);
	}
	print_message("ended %s %lld ms after its pause\n", st,
		      (long long)(sbx_wall_ms() - paused_at));
	assert_string_equal(st, "expired");
	snprintf(cmd, sizeof(cmd), "find %s -name '%s.*' | wc -l", d.state_dir, dom);
	for (i = 0; i < 50; i++) {
		assert_int_equal(cmd_out(cmd, out, sizeof(out)), 0);
		if (atoi(out) == 0)
			break;
		usleep(100 * 1000);
	}
	assert_int_equal(atoi(out), 0);
	assert_int_equal(daemon_ledger_check(&d, &err), 0);

	/* A resume past the retention, which the sweep (every 5 s) may not
	 * have reached yet, does not bring it back: 410, expired. */
	assert_int_equal(daemon_create_sandbox_as(&d, d.key, 600, sbx, sizeof(sbx)), 0);
	r = pause_or_resume("/pause", NULL);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	usleep(3300 * 1000);
	r = pause_or_resume("/resume", NULL);
	print_message("resume 3.3 s into a 3 s retention: %d\n", r.status);
	assert_int_equal(r.status, 410);
	http_reply_free(&r);
	assert_int_equal(daemon_sandbox_status(&d, sbx, st, sizeof(st)), 200);
	assert_string_equal(st, "expired");
	assert_int_equal(daemon_ledger_check(&d, &err), 0);
}

/* ------------------------------------------------------------- 6. */

/* The sandbox's expiry, read from its object. */
static int64_t expires_of(struct http_reply *r)
{
	int64_t at = 0;

	assert_int_equal(sbx_rfc3339_parse(jstr(r->json, "expires_at"), &at), 0);
	return at;
}

/* Create sbx with timeout_action "pause" and `minutes` of timeout, run
 * `cmd` in it (NULL: none), and wait until it is no longer running: its
 * status into st. */
static void create_pausing_at_expiry(int minutes, const char *cmd, char *st, size_t n)
{
	char body[128];
	struct http_reply r;
	int i;

	snprintf(body, sizeof(body), "{\"timeout_minutes\": %d, \"timeout_action\": \"pause\"}",
		 minutes);
	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, NULL, body, 0, &r), 0);
	assert_int_equal(r.status, 201);
	assert_string_equal(jstr(r.json, "timeout_action"), "pause");
	snprintf(sbx, sizeof(sbx), "%s", jstr(r.json, "id"));
	http_reply_free(&r);
	if (cmd) {
		r = exec_ok(cmd);
		http_reply_free(&r);
	}
	for (i = 0; i < 150; i++) {
		assert_int_equal(daemon_sandbox_status(&d, sbx, st, n), 200);
		if (strcmp(st, "running") != 0)
			break;
		usleep(200 * 1000);
	}
}

/* timeout_action "pause": at its expiry the sandbox is paused, not ended
 * (paused_at = expires_at: runtime billed to it), with its file; a resume
 * with no body gives it the default timeout, one with timeout_minutes that
 * long, each held; one whose storage the account cannot hold ends expired
 * at its expiry; the ledger holds. A "minute" is 1 s here. */
static void timeout_action_pauses_at_expiry(void **state)
{
	char st[32];
	struct http_reply r;
	struct sbx_error err;
	int64_t t;

	(void)state;
	daemon_kill9(&d);
	start_with("\"test_minute_ms\": 1000, \"default_timeout_minutes\": 20");
	assert_int_equal(http_request(&d, "POST", "/v1/sandboxes", d.key, NULL,
				      "{\"timeout_minutes\": 8, \"timeout_action\": \"nap\"}", 0,
				      &r),
			 0);
	assert_int_equal(r.status, 400);
	assert_string_equal(jerr(r.json, "param"), "timeout_action");
	http_reply_free(&r);
	create_pausing_at_expiry(8, "echo kept-past-expiry > /root/t", st, sizeof(st));
	assert_string_equal(st, "paused");
	r = req(d.key, "GET", "", NULL);
	assert_string_equal(jstr(r.json, "paused_at"), jstr(r.json, "expires_at"));
	http_reply_free(&r);
	assert_int_equal(daemon_ledger_check(&d, &err), 0);

	/* a bad timeout: 400, still paused */
	r = req(d.key, "POST", "/resume", "{\"timeout_minutes\": 0}");
	assert_int_equal(r.status, 400);
	http_reply_free(&r);
	/* no body: the default timeout (20 "minutes") from the resume */
	t = sbx_wall_ms();
	r = pause_or_resume("/resume", NULL);
	assert_int_equal(r.status, 200);
	assert_string_equal(jstr(r.json, "status"), "running");
	print_message("resumed with %lld ms left\n", (long long)(expires_of(&r) - t));
	assert_true(expires_of(&r) >= t + 19000 && expires_of(&r) <= sbx_wall_ms() + 21000);
	http_reply_free(&r);
	r = exec_ok("cat /root/t");
	assert_string_equal(jstr(r.json, "stdout"), "kept-past-expiry\n");
	http_reply_free(&r);

	/* paused by hand, resumed with 40: it runs 40 from then */
	r = pause_or_resume("/pause", NULL);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	t = sbx_wall_ms();
	r = req(d.key, "POST", "/resume", "{\"timeout_minutes\": 40}");
	assert_int_equal(r.status, 200);
	assert_true(expires_of(&r) >= t + 39000 && expires_of(&r) <= sbx_wall_ms() + 41000);
	http_reply_free(&r);
	assert_int_equal(daemon_ledger_check(&d, &err), 0);
	r = req(d.key, "DELETE", "", NULL);
	assert_int_equal(r.status, 200);
	http_reply_free(&r);
	assert_int_equal(daemon_ledger_check(&d, &err), 0);

	/* storage the account cannot hold: not paused, it ends expired at its
	 * expiry, by rule, as without timeout_action */
	daemon_kill9(&d);
	start_with("\"test_minute_ms\": 1000, \"paused_storage_micro_per_gib_hour\": 1000000000");
	create_pausing_at_expiry(5, NULL, st, sizeof(st));
	assert_string_equal(st, "expired");
	r = req(d.key, "GET", "", NULL);
	assert_string_equal(jstr(r.json, "ended_at"), jstr(r.json, "expires_at"));
	http_reply_free(&r);
	assert_int_equal(daemon_ledger_check(&d, &err), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(state_survives_a_pause),
	    cmocka_unit_test(runtime_billed_only_while_running),
	    cmocka_unit_test(a_restart_keeps_it_paused),
	    cmocka_unit_test(a_crash_mid_pause_or_resume_is_consistent),
	    cmocka_unit_test(refused_before_the_save_and_deadlines),
	    cmocka_unit_test(no_room_for_the_save_refuses_the_pause),
	    cmocka_unit_test(delete_of_a_paused_sandbox_settles),
	    cmocka_unit_test(paused_retention_ends_it),
	    cmocka_unit_test(timeout_action_pauses_at_expiry),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
