/* sbx, the command-line client (cli/), run as a real program against a
 * real daemon and one guest of the tiny image (1 vCPU, 256 MiB): create,
 * ls, get, exec (streams split, exact bytes, exit code, env and cwd,
 * timeout 124, 125 on a destroyed sandbox), extend, rm; the configuration
 * order (flags over SANDBOXD_* over the config file); exit codes; no
 * progress output on a pipe; `run` with a signed receipt (the daemon's
 * dev-process runner: no second guest) checked offline by `sbx receipt
 * verify`, a tampered reply refused; usage tables; keys create/revoke.
 * And the daemon's sd_notify READY=1 (the systemd unit is Type=notify).
 *
 * SBX_CLI names the binary (default: sbx next to SBX_BIN).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sys/time.h>
#include <sys/un.h>

#include "harness.h"

static struct daemon d;
static char sbx_id[64];
static char cli_path[512];
static char work[320];			    /* scratch dir under the state dir */
static const char *sbx_stdin = "/dev/null"; /* what sbx() gives the command on stdin */
static int notify_fd = -1;

struct run {
	int rc;
	char *out, *err;
	size_t out_len;
};

static void run_free(struct run *r)
{
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof(*r));
}

static int setup(void **state)
{
	const char *cli = getenv("SBX_CLI"), *bin = sbx_bin(), *slash = strrchr(bin, '/');

	if (cli)
		snprintf(cli_path, sizeof(cli_path), "%s", cli);
	else if (slash)
		snprintf(cli_path, sizeof(cli_path), "%.*s/sbx", (int)(slash - bin), bin);
	else
		snprintf(cli_path, sizeof(cli_path), "bin/sbx");
	daemon_config(&d, "\"sizes\": {\"small\": {\"vcpus\": 1, \"memory_mib\": 256, "
			  "\"disk_gib\": 1, \"price_micro_usd_per_hour\": 90000}}, "
			  "\"execution_runner\": \"dev-process\", "
			  "\"execution_test_shell_runtime\": true, \"metrics_interval_ms\": 1000");
	snprintf(work, sizeof(work), "%s/cli", d.state_dir);
	if (sbx_mkdir_p(work, 0700) < 0)
		return -1;
	/* a service manager's notify socket, as systemd's Type=notify gives */
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = 60};
	if (strlen(work) + sizeof("/notify") > sizeof(sa.sun_path))
		return -1;
	memcpy(sa.sun_path, work, strlen(work));
	memcpy(sa.sun_path + strlen(work), "/notify", sizeof("/notify"));
	notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (notify_fd < 0 || bind(notify_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    setsockopt(notify_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		return -1;
	setenv("NOTIFY_SOCKET", sa.sun_path, 1);
	int rc = daemon_up(&d);
	unsetenv("NOTIFY_SOCKET");
	return rc < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	if (notify_fd >= 0)
		close(notify_fd);
	return daemon_down(&d);
}

/* sd_notify: READY=1 once the port is bound (the first line on stdout was
 * read by daemon_up, so the datagram has been sent). */
static void daemon_tells_systemd_it_is_ready(void **state)
{
	char buf[256];
	ssize_t n = recv(notify_fd, buf, sizeof(buf) - 1, 0);

	assert_true(n > 0);
	buf[n] = '\0';
	assert_string_equal(buf, "READY=1");
}

/* Run `sbx ARGS` under `env` (shell assignments, "" for the default: the
 * daemon's URL and key in SANDBOXD_*, an empty XDG_CONFIG_HOME), stdin
 * from /dev/null, stdout and stderr into files; returns what it printed
 * and its exit code. */
static struct run sbx(const char *env, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static struct run sbx(const char *env, const char *fmt, ...)
{
	char args[2048], cmd[8192], path[400];
	struct run r = {0};
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	if (!env || !env[0]) {
		static char def[1024];
		snprintf(def, sizeof(def),
			 "SANDBOXD_URL=http://127.0.0.1:%d SANDBOXD_KEY=%s XDG_CONFIG_HOME=%s/none",
			 d.port, d.key, work);
		env = def;
	}
	snprintf(cmd, sizeof(cmd),
		 "env -i PATH=/usr/bin:/bin HOME=%s/home %s %s %s <%s >%s/out 2>%s/err", work, env,
		 cli_path, args, sbx_stdin, work, work);
	r.rc = run_cmd(cmd);
	snprintf(path, sizeof(path), "%s/out", work);
	r.out = sbx_read_file(path, 64u << 20, &r.out_len);
	snprintf(path, sizeof(path), "%s/err", work);
	r.err = sbx_read_file(path, 64u << 20, &n);
	assert_non_null(r.out);
	assert_non_null(r.err);
	return r;
}

static void write_text(const char *name, const char *text)
{
	char path[400];

	snprintf(path, sizeof(path), "%s/%s", work, name);
	assert_int_equal(sbx_write_file(path, text, strlen(text), 0600), 0);
}

static void help_and_usage_errors(void **state)
{
	struct run r = sbx("", "--help");

	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, "usage: sbx"));
	run_free(&r);
	r = sbx("", "exec --help");
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, "usage: sbx exec ID"));
	run_free(&r);
	r = sbx("", "frobnicate");
	assert_int_equal(r.rc, 2);
	assert_string_equal(r.err, "sbx: unknown command 'frobnicate' (see 'sbx --help')\n");
	run_free(&r);
	/* a near miss names the command meant */
	r = sbx("", "lss");
	assert_int_equal(r.rc, 2);
	assert_string_equal(r.err,
			    "sbx: unknown command 'lss'; did you mean 'ls'? (see 'sbx --help')\n");
	run_free(&r);
	/* extend sets the expiry to now + MIN; the help says so */
	r = sbx("", "--help");
	assert_non_null(strstr(r.out, "make it expire MIN minutes from now"));
	assert_null(strstr(r.out, "minutes on"));
	run_free(&r);
	r = sbx("", "create --sise small");
	assert_int_equal(r.rc, 2);
	assert_non_null(strstr(r.err, "unknown option '--sise'"));
	run_free(&r);
	r = sbx("", "extend sbx_1 soon");
	assert_int_equal(r.rc, 2);
	run_free(&r);
	/* exec: usage errors are 125, so that 2 stays the command's */
	r = sbx("", "exec sbx_1");
	assert_int_equal(r.rc, 125);
	run_free(&r);
}

static void configuration_order_and_exit_codes(void **state)
{
	char env[1024], cfg[400];
	struct run r;

	/* no key anywhere: usage error, nothing sent */
	snprintf(env, sizeof(env), "SANDBOXD_URL=http://127.0.0.1:%d XDG_CONFIG_HOME=%s/none",
		 d.port, work);
	r = sbx(env, "ls");
	assert_int_equal(r.rc, 2);
	assert_non_null(strstr(r.err, "SANDBOXD_KEY"));
	run_free(&r);

	/* the config file alone */
	snprintf(cfg, sizeof(cfg), "%s/xdg/sandboxd", work);
	assert_int_equal(sbx_mkdir_p(cfg, 0700), 0);
	snprintf(env, sizeof(env), "# sbx test\nurl = http://127.0.0.1:%d/\nkey = %s\n", d.port,
		 d.key);
	write_text("xdg/sandboxd/config", env);
	snprintf(env, sizeof(env), "XDG_CONFIG_HOME=%s/xdg", work);
	r = sbx(env, "keys --json");
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, "\"object\""));
	assert_string_equal(r.err, ""); /* mode 0600: no warning */
	run_free(&r);

	/* SANDBOXD_KEY over the file: a wrong one is 401 -> 4, with the API's message */
	snprintf(env, sizeof(env), "XDG_CONFIG_HOME=%s/xdg SANDBOXD_KEY=aas_sk_wrong", work);
	r = sbx(env, "ls");
	assert_int_equal(r.rc, 4);
	assert_non_null(strstr(r.err, "authentication_error"));
	run_free(&r);
	/* --key over SANDBOXD_KEY */
	r = sbx(env, "--key %s ls", d.key);
	assert_int_equal(r.rc, 0);
	run_free(&r);
	/* and a global flag after the command works too */
	r = sbx(env, "ls --key=%s", d.key);
	assert_int_equal(r.rc, 0);
	run_free(&r);
	/* SANDBOXD_URL over the file: nobody listens on port 1 -> 3 */
	snprintf(env, sizeof(env), "XDG_CONFIG_HOME=%s/xdg SANDBOXD_URL=http://127.0.0.1:1", work);
	r = sbx(env, "ls");
	assert_int_equal(r.rc, 3);
	assert_non_null(strstr(r.err, "cannot reach"));
	run_free(&r);
	/* a bad config file is a usage error naming the line */
	write_text("xdg/sandboxd/config", "url = http://127.0.0.1:1\ncolour = blue\n");
	r = sbx(env, "ls");
	assert_int_equal(r.rc, 2);
	assert_non_null(strstr(r.err, "config:2"));
	run_free(&r);
}

static void create_ls_get(void **state)
{
	json_object *o;
	struct run r = sbx("", "create --timeout 5");

	assert_int_equal(r.rc, 0);
	/* one line, the id; on a pipe not a byte of progress on stderr */
	assert_int_equal(strncmp(r.out, "sbx_", 4), 0);
	assert_int_equal(r.out[r.out_len - 1], '\n');
	assert_null(strchr(r.out, ' '));
	assert_string_equal(r.err, "");
	snprintf(sbx_id, sizeof(sbx_id), "%.*s", (int)(r.out_len - 1), r.out);
	run_free(&r);

	r = sbx("", "get %s --json", sbx_id);
	assert_int_equal(r.rc, 0);
	assert_non_null(o = json_tokener_parse(r.out));
	assert_string_equal(jstr(o, "status"), "running");
	assert_string_equal(jstr(o, "id"), sbx_id);
	json_object_put(o);
	run_free(&r);

	r = sbx("", "ls");
	assert_int_equal(r.rc, 0);
	assert_int_equal(strncmp(r.out, "ID ", 3), 0);
	assert_non_null(strstr(r.out, sbx_id));
	assert_non_null(strstr(r.out, "running"));
	run_free(&r);

	r = sbx("", "get %s", sbx_id);
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, "status      running"));
	run_free(&r);

	r = sbx("", "get sbx_00000000000000000000dead");
	assert_int_equal(r.rc, 5);
	assert_non_null(strstr(r.err, "no such sandbox"));
	run_free(&r);

	/* one page of two: the hint names the real next page */
	char second[64], hint[256];
	r = sbx("", "create --timeout 1 --label 'job=a/b c' --label team=ml");
	assert_int_equal(r.rc, 0);
	snprintf(second, sizeof(second), "%.*s", (int)(r.out_len - 1), r.out);
	run_free(&r);
	/* labels: shown by get, filtering ls (the value percent-encoded) */
	r = sbx("", "get %s", second);
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, "metadata    job=a/b c team=ml\n"));
	run_free(&r);
	r = sbx("", "ls --label 'job=a/b c' --label team=ml");
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, second));
	assert_null(strstr(r.out, sbx_id));
	run_free(&r);
	r = sbx("", "ls --label job=a/b");
	assert_int_equal(r.rc, 0);
	assert_null(strstr(r.out, second));
	run_free(&r);
	r = sbx("", "ls --label job");
	assert_int_equal(r.rc, 2);
	assert_non_null(strstr(r.err, "not KEY=VALUE"));
	run_free(&r);
	r = sbx("", "ls --limit 1");
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, second));
	assert_null(strstr(r.out, sbx_id));
	snprintf(hint, sizeof(hint), "sbx: more sandboxes: sbx ls --limit 1 --starting-after %s\n",
		 second);
	assert_string_equal(r.err, hint);
	run_free(&r);
	r = sbx("", "ls --limit 1 --starting-after %s", second);
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, sbx_id));
	run_free(&r);
	r = sbx("", "rm %s", second);
	assert_int_equal(r.rc, 0);
	run_free(&r);
}

static void exec_streams_and_exit_code(void **state)
{
	struct run r;
	json_object *o;

	r = sbx("", "exec %s -- 'echo out; echo err >&2; exit 7'", sbx_id);
	assert_int_equal(r.rc, 7);
	assert_string_equal(r.out, "out\n");
	assert_string_equal(r.err, "err\n");
	run_free(&r);

	/* several words are joined with spaces (as ssh does) */
	r = sbx(
	    "",
	    "exec %s --env GREETING=hi --env B=x=y --cwd /tmp -- echo '$GREETING' '$B' '&&' pwd",
	    sbx_id);
	assert_int_equal(r.rc, 0);
	assert_string_equal(r.out, "hi x=y\n/tmp\n");
	run_free(&r);

	/* exact bytes, NUL and invalid UTF-8 included */
	r = sbx("", "exec %s -- \"printf 'a\\\\000b\\\\377'\"", sbx_id);
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.out_len, 4);
	assert_memory_equal(r.out, "a\0b\377", 4);
	run_free(&r);

	r = sbx("", "exec %s --timeout-ms 300 -- sleep 5", sbx_id);
	assert_int_equal(r.rc, 124);
	assert_non_null(strstr(r.err, "timed out"));
	run_free(&r);

	r = sbx("", "exec %s --json -- 'echo j; exit 3'", sbx_id);
	assert_int_equal(r.rc, 3);
	assert_non_null(o = json_tokener_parse(r.out));
	assert_string_equal(jstr(o, "stdout"), "j\n");
	json_object_put(o);
	run_free(&r);

	/* output as it arrives (the streamed exec): stopped while the command
	 * still sleeps, sbx has already written the first line */
	{
		char cmd[2048], path[400];
		size_t n;

		snprintf(
		    cmd, sizeof cmd,
		    "env -i PATH=/usr/bin:/bin SANDBOXD_URL=http://127.0.0.1:%d SANDBOXD_KEY=%s "
		    "timeout -s INT 3 %s exec %s -- 'echo first; sleep 8; echo second' "
		    ">%s/streamed 2>/dev/null; true",
		    d.port, d.key, cli_path, sbx_id, work);
		assert_int_equal(run_cmd(cmd), 0);
		snprintf(path, sizeof path, "%s/streamed", work);
		_cleanup_free_ char *got = sbx_read_file(path, 4096, &n);
		assert_non_null(got);
		assert_string_equal(got, "first\n");
	}

	/* an API error: its message on stderr, 125 */
	r = sbx("", "exec %s --cwd /no/such/dir -- true", sbx_id);
	assert_int_equal(r.rc, 125);
	assert_non_null(strstr(r.err, "param cwd"));
	run_free(&r);
}

/* sbx cp: a file (bytes and mode) up and back down, a directory as tar
 * up and down, and the error of a missing remote file (exit 5, no local
 * file left behind). */
static void cp_files_and_directories(void **state)
{
	char cmd[2048], path[400];
	struct run r;

	(void)state;
	snprintf(cmd, sizeof cmd,
		 "set -e; cd %s; head -c 300000 /dev/urandom > blob; chmod 0640 blob; "
		 "mkdir -p tree/sub; echo one > tree/a; echo two > tree/sub/b",
		 work);
	assert_int_equal(run_cmd(cmd), 0);
	r = sbx("", "cp %s/blob %s:/home/sandbox/blob", work, sbx_id);
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.err, "300000 bytes"));
	run_free(&r);
	r = sbx("", "exec %s -- 'stat -c %%a /home/sandbox/blob; wc -c < /home/sandbox/blob'",
		sbx_id);
	assert_int_equal(r.rc, 0);
	assert_string_equal(r.out, "640\n300000\n");
	run_free(&r);
	r = sbx("", "cp %s:/home/sandbox/blob %s/back", sbx_id, work);
	assert_int_equal(r.rc, 0);
	run_free(&r);
	snprintf(cmd, sizeof cmd, "cmp -s %s/blob %s/back", work, work);
	assert_int_equal(run_cmd(cmd), 0);
	/* onto existing directories, as cp(1): inside them, same name */
	r = sbx("", "cp %s/blob %s:/tmp", work, sbx_id);
	assert_int_equal(r.rc, 0);
	run_free(&r);
	snprintf(cmd, sizeof cmd, "mkdir -p %s/into", work);
	assert_int_equal(run_cmd(cmd), 0);
	r = sbx("", "cp %s:/tmp/blob %s/into/", sbx_id, work);
	assert_int_equal(r.rc, 0);
	run_free(&r);
	snprintf(cmd, sizeof cmd, "cmp -s %s/blob %s/into/blob", work, work);
	assert_int_equal(run_cmd(cmd), 0);

	r = sbx("", "cp %s/tree %s:/home/sandbox/tree", work, sbx_id);
	assert_int_equal(r.rc, 0);
	run_free(&r);
	r = sbx("", "exec %s -- 'cat /home/sandbox/tree/a /home/sandbox/tree/sub/b'", sbx_id);
	assert_string_equal(r.out, "one\ntwo\n");
	run_free(&r);
	r = sbx("", "cp %s:/home/sandbox/tree %s/tree2", sbx_id, work);
	assert_int_equal(r.rc, 0);
	run_free(&r);
	snprintf(cmd, sizeof cmd, "diff -r %s/tree %s/tree2", work, work);
	assert_int_equal(run_cmd(cmd), 0);

	r = sbx("", "cp %s:/home/sandbox/nothing-here %s/none", sbx_id, work);
	assert_int_equal(r.rc, 5);
	assert_non_null(strstr(r.err, "file_not_found"));
	run_free(&r);
	snprintf(path, sizeof path, "%s/none", work);
	assert_int_not_equal(access(path, F_OK), 0);
	snprintf(path, sizeof path, "%s/none.sbx-partial", work);
	assert_int_not_equal(access(path, F_OK), 0);
	r = sbx("", "cp %s/blob %s/elsewhere", work, work);
	assert_int_equal(r.rc, 2);
	run_free(&r);

	/* '-' is stdout and stdin, not a file named '-' */
	size_t blob_len;
	char *blob;
	snprintf(path, sizeof path, "%s/blob", work);
	assert_non_null(blob = sbx_read_file(path, 1u << 20, &blob_len));
	r = sbx("", "cp %s:/home/sandbox/blob -", sbx_id);
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.out_len, blob_len);
	assert_memory_equal(r.out, blob, blob_len);
	assert_non_null(strstr(r.err, "to stdout"));
	run_free(&r);
	free(blob);
	assert_int_not_equal(access("-", F_OK), 0);
	sbx_stdin = path;
	r = sbx("", "cp - %s:/home/sandbox/from-stdin", sbx_id);
	sbx_stdin = "/dev/null";
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.err, "copied stdin to"));
	assert_non_null(strstr(r.err, "(300000 bytes)"));
	run_free(&r);
	r = sbx("",
		"exec %s -- 'stat -c %%a /home/sandbox/from-stdin; cmp /home/sandbox/blob "
		"/home/sandbox/from-stdin && echo same'",
		sbx_id);
	assert_string_equal(r.out, "644\nsame\n");
	run_free(&r);
	/* a directory to stdout: its tar stream */
	r = sbx("", "cp %s:/home/sandbox/tree -", sbx_id);
	assert_int_equal(r.rc, 0);
	assert_true(r.out_len >= 1024);
	assert_memory_equal(r.out + 257, "ustar", 5);
	run_free(&r);
}

/* sbx metrics: a table of the newest samples (one comes after two
 * readings a second apart), --last, --json; an unknown sandbox exits 5. */
static void metrics_table(void **state)
{
	json_object *o, *a;
	struct run r;
	int rows = 0;

	(void)state;
	for (int i = 0; i < 50 && rows < 3; i++) {
		usleep(200 * 1000);
		r = sbx("", "metrics %s", sbx_id);
		assert_int_equal(r.rc, 0);
		assert_int_equal(strncmp(r.out, "AT ", 3), 0);
		assert_non_null(strstr(r.out, "CPU_CORES"));
		assert_non_null(strstr(r.out, "MEMORY_MIB(GUEST)"));
		rows = 0;
		for (const char *p = r.out; (p = strchr(p, '\n')); p++)
			rows++;
		rows--; /* the header */
		run_free(&r);
	}
	assert_true(rows >= 3);
	r = sbx("", "metrics %s --last 2", sbx_id);
	assert_int_equal(r.rc, 0);
	rows = 0;
	for (const char *p = r.out; (p = strchr(p, '\n')); p++)
		rows++;
	assert_int_equal(rows, 3);
	/* the tiny image has no disk */
	assert_non_null(strstr(r.out, " -\n"));
	run_free(&r);
	r = sbx("", "metrics %s --json", sbx_id);
	assert_int_equal(r.rc, 0);
	assert_non_null(o = json_tokener_parse(r.out));
	assert_int_equal(jint(o, "interval_ms"), 1000);
	assert_true(json_object_object_get_ex(o, "samples", &a));
	assert_true(json_object_array_length(a) >= 3);
	json_object_put(o);
	run_free(&r);
	r = sbx("", "metrics sbx_00000000000000000000dead");
	assert_int_equal(r.rc, 5);
	run_free(&r);
	r = sbx("", "metrics %s --last x", sbx_id);
	assert_int_equal(r.rc, 2);
	run_free(&r);
}

static void extend_then_rm(void **state)
{
	struct run r = sbx("", "extend %s 10", sbx_id);
	json_object *o;

	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, "expires at"));
	run_free(&r);

	r = sbx("", "rm %s", sbx_id);
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, "destroyed, cost"));
	run_free(&r);
	assert_int_equal(count_own_domains(&d), 0);

	r = sbx("", "exec %s -- true", sbx_id);
	assert_int_equal(r.rc, 125);
	assert_non_null(strstr(r.err, "sandbox_not_running"));
	run_free(&r);

	r = sbx("", "get %s --json", sbx_id);
	assert_non_null(o = json_tokener_parse(r.out));
	assert_string_equal(jstr(o, "status"), "destroyed");
	json_object_put(o);
	run_free(&r);

	/* rm goes on past a failure and exits with its code */
	r = sbx("", "rm sbx_00000000000000000000dead %s", sbx_id);
	assert_int_equal(r.rc, 5);
	run_free(&r);
}

static void run_and_verify_a_receipt_offline(void **state)
{
	char env[600], rid[64];
	json_object *o, *rc;
	struct run r;

	write_text("code.sh", "echo hello; echo oops >&2; exit 3\n");
	r = sbx("", "run --runtime sh %s/code.sh", work);
	assert_int_equal(r.rc, 3);
	assert_string_equal(r.out, "hello\n");
	assert_non_null(strstr(r.err, "oops\n"));
	assert_non_null(strstr(r.err, "sbx: receipt rcpt_"));
	run_free(&r);

	r = sbx("", "run --runtime sh --json %s/code.sh", work);
	assert_int_equal(r.rc, 3);
	write_text("execution.json", r.out);
	assert_non_null(o = json_tokener_parse(r.out));
	assert_true(json_object_object_get_ex(o, "receipt", &rc));
	snprintf(rid, sizeof(rid), "%s", jstr(rc, "id"));
	/* the salt sits beside the receipt, as on exec; not in billing */
	{
		json_object *bill, *salt;
		assert_true(json_object_object_get_ex(rc, "fingerprint_salt", &salt));
		assert_int_equal(strlen(jstr(rc, "fingerprint_salt")), 66);
		assert_true(json_object_object_get_ex(o, "billing", &bill));
		assert_false(json_object_object_get_ex(bill, "fingerprint_salt", NULL));
		/* the shape of executions made before it moved: salt in billing */
		json_object_object_add(bill, "fingerprint_salt", json_object_get(salt));
		json_object_object_del(rc, "fingerprint_salt");
		write_text("execution-old.json",
			   json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
								 JSON_C_TO_STRING_NOSLASHESCAPE));
	}
	json_object_put(o);
	run_free(&r);

	r = sbx("", "receipt get %s", rid);
	assert_int_equal(r.rc, 0);
	write_text("receipt.json", r.out);
	run_free(&r);
	r = sbx("", "receipt public-key");
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, "BEGIN PUBLIC KEY"));
	write_text("key.pem", r.out);
	run_free(&r);

	/* offline: no URL that answers, no key */
	snprintf(env, sizeof(env), "SANDBOXD_URL=http://127.0.0.1:1 XDG_CONFIG_HOME=%s/none", work);
	r = sbx(env,
		"receipt verify %s/receipt.json --public-key %s/key.pem --execution "
		"%s/execution.json --code %s/code.sh --runtime sh",
		work, work, work, work);
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, "valid: receipt rcpt_"));
	assert_non_null(strstr(r.out, "input fingerprint verified"));
	run_free(&r);
	r = sbx(env,
		"receipt verify %s/receipt.json --public-key %s/key.pem --execution "
		"%s/execution-old.json",
		work, work, work);
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, "output fingerprint"));
	run_free(&r);

	/* another output than the one signed */
	{
		char cmd[1200];
		snprintf(cmd, sizeof(cmd),
			 "sed 's/hello/HELLO/' %s/execution.json > %s/forged.json", work, work);
		assert_int_equal(run_cmd(cmd), 0);
	}
	r = sbx(env,
		"receipt verify %s/receipt.json --public-key %s/key.pem --execution %s/forged.json",
		work, work, work);
	assert_int_equal(r.rc, 1);
	assert_non_null(strstr(r.out, "invalid: the output"));
	run_free(&r);
	/* another signer than the one pinned */
	r = sbx(env, "receipt verify %s/receipt.json --signer 0x%064d", work, 0);
	assert_int_equal(r.rc, 1);
	run_free(&r);
	/* unpinned */
	r = sbx(env, "receipt verify %s/receipt.json", work);
	assert_int_equal(r.rc, 2);
	assert_non_null(strstr(r.err, "pin the signer"));
	run_free(&r);
}

static void usage_and_keys(void **state)
{
	char env[600], secret[128], key_id[64];
	json_object *o, *data;
	struct run r = sbx("", "usage");

	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, "balance_usd"));
	assert_non_null(strstr(r.out, "SIZE"));
	run_free(&r);
	r = sbx("", "usage --granularity day --json");
	assert_int_equal(r.rc, 0);
	assert_non_null(o = json_tokener_parse(r.out));
	assert_true(jint(o, "consumed_micro_usd") > 0);
	json_object_put(o);
	run_free(&r);
	r = sbx("", "usage --granularity day");
	assert_non_null(strstr(r.out, "START"));
	run_free(&r);
	r = sbx("", "usage --granularity week");
	assert_int_equal(r.rc, 1);
	assert_non_null(strstr(r.err, "param granularity"));
	run_free(&r);
	/* hourly: the last 24 hours, none in the future (not the whole month) */
	char now_s[32], day[16];
	sbx_rfc3339(sbx_wall_ms(), now_s);
	r = sbx("", "usage --granularity hour --json");
	assert_int_equal(r.rc, 0);
	assert_non_null(o = json_tokener_parse(r.out));
	assert_true(json_object_object_get_ex(o, "buckets", &data));
	assert_int_equal(json_object_array_length(data), 24);
	assert_true(strcmp(jstr(json_object_array_get_idx(data, 23), "start"), now_s) <= 0);
	json_object_put(o);
	run_free(&r);
	r = sbx("", "usage --granularity hour");
	assert_int_equal(r.rc, 0);
	{
		const char *rows = strstr(r.out, "START");
		size_t n = 0;
		assert_non_null(rows);
		for (; *rows; rows++)
			n += *rows == '\n';
		assert_int_equal(n, 1 + 24);
	}
	run_free(&r);
	/* plain dates: --to's day is included */
	snprintf(day, sizeof(day), "%.10s", now_s);
	r = sbx("", "usage --from %s --to %s --granularity day --json", day, day);
	assert_int_equal(r.rc, 0);
	assert_non_null(o = json_tokener_parse(r.out));
	assert_true(json_object_object_get_ex(o, "buckets", &data));
	assert_int_equal(json_object_array_length(data), 1);
	assert_true(json_object_object_get_ex(o, "period", &data));
	assert_int_equal(strncmp(jstr(data, "from"), day, 10), 0);
	assert_string_equal(jstr(data, "from") + 10, "T00:00:00Z");
	assert_true(jint(o, "consumed_micro_usd") > 0);
	json_object_put(o);
	run_free(&r);
	r = sbx("", "usage --from 2026-02-30");
	assert_int_equal(r.rc, 2);
	run_free(&r);

	/* scopes: set at create, shown by the list */
	r = sbx("", "keys create --scope sandboxes");
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.err, "(scopes sandboxes)"));
	run_free(&r);
	r = sbx("", "keys");
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, "SCOPES"));
	assert_non_null(strstr(r.out, "  sandboxes  "));
	assert_non_null(strstr(r.out, "  sandboxes,keys  "));
	run_free(&r);
	r = sbx("", "keys create --scope nonsense");
	assert_int_equal(r.rc, 1);
	assert_non_null(strstr(r.err, "param scopes"));
	run_free(&r);

	r = sbx("", "keys create");
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.err, "(scopes sandboxes,keys)"));
	assert_int_equal(strncmp(r.out, "aas_sk_", 7), 0);
	snprintf(secret, sizeof(secret), "%.*s", (int)strcspn(r.out, "\n"), r.out);
	run_free(&r);
	snprintf(env, sizeof(env), "SANDBOXD_URL=http://127.0.0.1:%d SANDBOXD_KEY=%s", d.port,
		 secret);
	r = sbx(env, "keys list --json");
	assert_int_equal(r.rc, 0);
	assert_non_null(o = json_tokener_parse(r.out));
	assert_true(json_object_object_get_ex(o, "data", &data));
	assert_int_equal(json_object_array_length(data), 3);
	key_id[0] = '\0';
	for (size_t i = 0; i < json_object_array_length(data); i++) {
		json_object *k = json_object_array_get_idx(data, i);
		const char *prefix = jstr(k, "prefix");
		if (prefix && strncmp(secret, prefix, strlen(prefix)) == 0)
			snprintf(key_id, sizeof(key_id), "%s", jstr(k, "id"));
	}
	assert_int_equal(strncmp(key_id, "key_", 4), 0);
	json_object_put(o);
	run_free(&r);
	r = sbx("", "keys");
	assert_non_null(strstr(r.out, key_id));
	run_free(&r);
	r = sbx("", "keys revoke %s", key_id);
	assert_int_equal(r.rc, 0);
	assert_non_null(strstr(r.out, "revoked"));
	run_free(&r);
	r = sbx(env, "ls");
	assert_int_equal(r.rc, 4);
	run_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(daemon_tells_systemd_it_is_ready),
	    cmocka_unit_test(help_and_usage_errors),
	    cmocka_unit_test(configuration_order_and_exit_codes),
	    cmocka_unit_test(create_ls_get),
	    cmocka_unit_test(exec_streams_and_exit_code),
	    cmocka_unit_test(cp_files_and_directories),
	    cmocka_unit_test(metrics_table),
	    cmocka_unit_test(extend_then_rm),
	    cmocka_unit_test(run_and_verify_a_receipt_offline),
	    cmocka_unit_test(usage_and_keys),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
