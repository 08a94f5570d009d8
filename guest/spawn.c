/* sandboxd-init: starting commands (guest_spawn) and ending their cgroups.
 *
 * An EXEC, or a PROC start (proc.c), is decoded and validated here
 * (exec_req_parse: command, cwd, env merged over the defaults and the
 * USER's, timeout, caps, STREAM, STDIN), then started: cgroup
 * sbx-exec-<id>.<n> -> fork (setsid, join cgroup, chdir, stdin from the
 * request's STDIN or /dev/null or a pipe, execve /bin/sh -c; a command too
 * long for one argv string goes through a memfd script). serve.c and
 * proc.c own what runs; they come back here to kill a command's tree
 * (guest_cgroup_kill) and to remove its cgroup once empty
 * (guest_cgroup_release, retried after each reap).
 */
#include "guest/init.h"
#include "agentless/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define LINGER_MAX	   256	      /* non-empty cgroups waiting for rmdir */
#define ENV_MAX		   1024	      /* env entries in one EXEC */
#define DEFAULT_CAP	   (1u << 20) /* output cap when EXEC has none */
#define DEFAULT_TIMEOUT_MS 60000      /* when EXEC has none */
#define DEFAULT_CWD	   "/home/sandbox"
/* Linux refuses any single argv or envp string of this many bytes or more,
 * NUL included (MAX_ARG_STRLEN, 32 pages): execve fails with E2BIG. */
#define ARG_STRLEN_MAX ((size_t)32 * 4096)
/* A longer command is handed to the shell through a memfd on this fd. */
#define SCRIPT_FD 9

static const char *const default_env[] = {
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME=/root",
    "LANG=C.UTF-8",
    "TERM=dumb",
    "USER=root",
    /* egress goes through the agent's proxy (proxy.c, docs/network.md) */
    "http_proxy=http://127.0.0.1:3128",
    "https_proxy=http://127.0.0.1:3128",
    "HTTP_PROXY=http://127.0.0.1:3128",
    "HTTPS_PROXY=http://127.0.0.1:3128",
    "no_proxy=localhost,127.0.0.1,::1",
    "NO_PROXY=localhost,127.0.0.1,::1",
};
#define DEFAULT_ENV_N (sizeof(default_env) / sizeof(default_env[0]))

/* The cgroups' serial (sbx-exec-<id>.<serial>), and the non-empty cgroups
 * waiting for rmdir. */
static uint64_t serial;
static char linger[LINGER_MAX][96];
static unsigned n_linger;

/* ------------------------------------------------------------- cgroups */

static int write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, s, strlen(s));
	close(fd);
	return n < 0 ? -1 : 0;
}

/* SIGKILL every process of a command: cgroup.kill, else each pid listed in
 * cgroup.procs; and the session's process group in any case (covers the
 * window before the child joined its cgroup, and guests without cgroup2). */
void guest_cgroup_kill(const char *cgroup, pid_t pid)
{
	char path[128];

	if (cgroup[0]) {
		snprintf(path, sizeof(path), "%s/cgroup.kill", cgroup);
		if (write_str(path, "1") < 0) {
			FILE *f;
			int member;

			snprintf(path, sizeof(path), "%s/cgroup.procs", cgroup);
			f = fopen(path, "re");
			if (f) {
				while (fscanf(f, "%d", &member) == 1)
					if (member > 1)
						kill(member, SIGKILL);
				fclose(f);
			}
		}
	}
	if (pid > 1) {
		kill(-pid, SIGKILL);
		kill(pid, SIGKILL);
	}
}

void guest_cgroup_linger_retry(void)
{
	unsigned j = 0;

	if (!n_linger)
		return;
	for (unsigned i = 0; i < n_linger; i++) {
		if (rmdir(linger[i]) == 0 || errno == ENOENT)
			continue;
		if (j != i)
			memcpy(linger[j], linger[i], sizeof(linger[0]));
		j++;
	}
	n_linger = j;
}

void guest_cgroup_release(const char *cg)
{
	if (!cg[0] || rmdir(cg) == 0 || errno == ENOENT)
		return;
	/* A background process lives on in it: rmdir once it is empty. */
	if (n_linger < LINGER_MAX)
		snprintf(linger[n_linger++], sizeof(linger[0]), "%s", cg);
}

/* --------------------------------------------------------------- request */

static bool env_name_ok(const uint8_t *v, size_t len, size_t *klen)
{
	const uint8_t *eq = memchr(v, '=', len);
	size_t k;

	if (!eq || eq == v)
		return false;
	k = (size_t)(eq - v);
	for (size_t i = 0; i < k; i++) {
		uint8_t c = v[i];

		if (!(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		      (i > 0 && c >= '0' && c <= '9')))
			return false;
	}
	*klen = k;
	return true;
}

struct exec_req {
	char *command;
	char *cwd;
	char **env; /* merged, NULL-terminated */
	size_t n_env;
	uint32_t timeout_ms, out_cap, err_cap;
	bool stream;	  /* v3 STREAM */
	char *stdin_data; /* v2: the command's stdin, NULL = /dev/null */
	size_t stdin_len;
	bool as_user; /* v2 USER: drop to uid/gid before exec */
	uid_t uid;
	gid_t gid;
	uint32_t rows, cols; /* v5: both set = a terminal (the login shell) */
	char user[64];	     /* the USER's name, "" for root */
};

static void exec_req_release(struct exec_req *r)
{
	free(r->command);
	free(r->cwd);
	if (r->env)
		for (size_t i = 0; i < r->n_env; i++)
			free(r->env[i]);
	free(r->env);
	free(r->stdin_data);
	memset(r, 0, sizeof(*r));
}

static char *dup_bytes(const uint8_t *v, size_t len)
{
	char *s = malloc(len + 1);

	if (s) {
		memcpy(s, v, len);
		s[len] = '\0';
	}
	return s;
}

/* Put "KEY=VALUE" s (taken; KEY = its first klen bytes) into r->env: an
 * entry with the same KEY is replaced, otherwise s is appended. */
static void env_put(struct exec_req *r, char *s, size_t klen)
{
	for (size_t i = 0; i < r->n_env; i++) {
		if (strncmp(r->env[i], s, klen + 1) == 0) {
			free(r->env[i]);
			r->env[i] = s;
			return;
		}
	}
	r->env[r->n_env++] = s;
	r->env[r->n_env] = NULL;
}

/* Merge one "KEY=VALUE" over r->env (same key replaces). */
static int env_merge(struct exec_req *r, const uint8_t *v, size_t len, size_t klen)
{
	char *s = dup_bytes(v, len);

	if (!s)
		return -1;
	env_put(r, s, klen);
	return 0;
}

/* Look `name` up in the guest's /etc/passwd ("name:x:uid:gid:gecos:home:
 * shell"); static binaries have no NSS. Fills uid, gid and home (>= 256
 * bytes). 0, or -1 when there is no such user. */
int guest_passwd_lookup(const char *name, uid_t *uid, gid_t *gid, char *home, size_t home_len)
{
	char line[512];
	size_t nlen = strlen(name);
	FILE *f = fopen("/etc/passwd", "re");
	int rc = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *fld[7];
		char *p = line;
		int n = 0;

		if (strncmp(line, name, nlen) != 0 || line[nlen] != ':')
			continue;
		line[strcspn(line, "\n")] = '\0';
		while (n < 7 && p) {
			fld[n++] = p;
			p = strchr(p, ':');
			if (p)
				*p++ = '\0';
		}
		if (n < 6)
			break;
		*uid = (uid_t)strtoul(fld[2], NULL, 10);
		*gid = (gid_t)strtoul(fld[3], NULL, 10);
		snprintf(home, home_len, "%s", fld[5][0] ? fld[5] : "/");
		rc = 0;
		break;
	}
	fclose(f);
	return rc;
}

/* Replace a default "KEY=..." entry of r->env (before request env is
 * merged over it). */
static int env_default_set(struct exec_req *r, const char *key, const char *value)
{
	size_t klen = strlen(key);
	char *s;

	if (asprintf(&s, "%s=%s", key, value) < 0)
		return -1;
	env_put(r, s, klen);
	return 0;
}

/* The USER field, looked at before the env fields so that the request's
 * env still wins over the user's defaults. 0, or -1 after sending ERROR. */
static int exec_req_user(uint32_t id, const uint8_t *p, size_t len, struct exec_req *r)
{
	struct wire_reader rd;
	struct wire_field f;
	char name[64], home[256];

	wire_reader_init(&rd, p, len);
	while (wire_next(&rd, &f) == 1) {
		if (f.tag != WIRE_T_USER)
			continue;
		if (f.len == 0 || f.len >= sizeof(name) || memchr(f.value, '\0', f.len) ||
		    memchr(f.value, ':', f.len)) {
			guest_send_error(id, WIRE_ERR_BAD_REQUEST, "user",
					 "user must be a user name");
			return -1;
		}
		memcpy(name, f.value, f.len);
		name[f.len] = '\0';
		if (guest_passwd_lookup(name, &r->uid, &r->gid, home, sizeof(home)) < 0) {
			guest_send_error(id, WIRE_ERR_SPAWN, NULL,
					 "the exec user is not in the guest");
			return -1;
		}
		r->as_user = true;
		memcpy(r->user, name, f.len + 1);
		if (env_default_set(r, "HOME", home) < 0 || env_default_set(r, "USER", name) < 0 ||
		    env_default_set(r, "LOGNAME", name) < 0) {
			guest_send_error(id, WIRE_ERR_SPAWN, NULL, "guest out of memory");
			return -1;
		}
		break;
	}
	return 0;
}

/* One field of an EXEC payload into r (n_req_env counts the request's
 * env entries). 0; -1 after sending ERROR; -2 when out of memory (the
 * caller sends the ERROR). */
static int exec_req_field(uint32_t id, const struct wire_field *f, struct exec_req *r,
			  size_t *n_req_env)
{
	switch (f->tag) {
	case WIRE_T_COMMAND:
		if (r->command || memchr(f->value, '\0', f->len)) {
			guest_send_error(id, WIRE_ERR_BAD_REQUEST, "command",
					 "command must be one string without NUL bytes");
			return -1;
		}
		if (!(r->command = dup_bytes(f->value, f->len)))
			return -2;
		break;
	case WIRE_T_CWD:
		if (r->cwd || f->len == 0 || f->len >= PATH_MAX || f->value[0] != '/' ||
		    memchr(f->value, '\0', f->len)) {
			guest_send_error(id, WIRE_ERR_BAD_REQUEST, "cwd",
					 "cwd must be an absolute path without NUL bytes");
			return -1;
		}
		if (!(r->cwd = dup_bytes(f->value, f->len)))
			return -2;
		break;
	case WIRE_T_ENV: {
		size_t klen;

		if (*n_req_env == ENV_MAX || memchr(f->value, '\0', f->len) ||
		    !env_name_ok(f->value, f->len, &klen)) {
			guest_send_error(id, WIRE_ERR_BAD_REQUEST, "env",
					 "env entries must be KEY=VALUE with a POSIX name, no NUL");
			return -1;
		}
		if (env_merge(r, f->value, f->len, klen) < 0)
			return -2;
		(*n_req_env)++;
		break;
	}
	case WIRE_T_TIMEOUT_MS:
	case WIRE_T_STDOUT_CAP:
	case WIRE_T_STDERR_CAP: {
		uint32_t v;
		const char *param = f->tag == WIRE_T_TIMEOUT_MS	  ? "timeout_ms"
				    : f->tag == WIRE_T_STDOUT_CAP ? "stdout_cap"
								  : "stderr_cap";

		if (wire_field_u32(f, &v) < 0 || (f->tag == WIRE_T_TIMEOUT_MS && v == 0)) {
			guest_send_error(id, WIRE_ERR_BAD_REQUEST, param,
					 "integer field has a bad length or value");
			return -1;
		}
		if (f->tag == WIRE_T_TIMEOUT_MS)
			r->timeout_ms = v;
		else if (f->tag == WIRE_T_STDOUT_CAP)
			r->out_cap = v;
		else
			r->err_cap = v;
		break;
	}
	case WIRE_T_STREAM: {
		uint32_t v;

		if (wire_field_u32(f, &v) < 0) {
			guest_send_error(id, WIRE_ERR_BAD_REQUEST, "stream",
					 "integer field has a bad length or value");
			return -1;
		}
		r->stream = v != 0;
		break;
	}
	case WIRE_T_ROWS:
	case WIRE_T_COLS: {
		uint32_t v;

		if (wire_field_u32(f, &v) < 0 || v == 0 || v > WIRE_PTY_DIM_MAX) {
			guest_send_error(id, WIRE_ERR_BAD_REQUEST, "rows",
					 "rows and cols must be 1..1000");
			return -1;
		}
		if (f->tag == WIRE_T_ROWS)
			r->rows = v;
		else
			r->cols = v;
		break;
	}
	case WIRE_T_STDIN:
		if (r->stdin_data) {
			guest_send_error(id, WIRE_ERR_BAD_REQUEST, "stdin", "stdin given twice");
			return -1;
		}
		if (!(r->stdin_data = malloc(f->len ? f->len : 1)))
			return -2;
		memcpy(r->stdin_data, f->value, f->len);
		r->stdin_len = f->len;
		break;
	default:
		break; /* unknown tags are skipped */
	}
	return 0;
}

/* Decode and validate an EXEC payload. 0, or -1 after sending ERROR. */
static int exec_req_parse(uint32_t id, const uint8_t *p, size_t len, struct exec_req *r)
{
	struct wire_reader rd;
	struct wire_field f;
	int rc;
	size_t n_req_env = 0;

	memset(r, 0, sizeof(*r));
	r->timeout_ms = DEFAULT_TIMEOUT_MS;
	r->out_cap = r->err_cap = DEFAULT_CAP;
	r->env = calloc(DEFAULT_ENV_N + ENV_MAX + 1, sizeof(char *));
	if (!r->env)
		goto err_nomem;
	for (size_t i = 0; i < DEFAULT_ENV_N; i++) {
		r->env[i] = strdup(default_env[i]);
		if (!r->env[i])
			goto err_nomem;
		r->n_env++;
	}

	if (exec_req_user(id, p, len, r) < 0)
		goto err;
	wire_reader_init(&rd, p, len);
	while ((rc = wire_next(&rd, &f)) == 1) {
		int frc = exec_req_field(id, &f, r, &n_req_env);

		if (frc == -2)
			goto err_nomem;
		if (frc < 0)
			goto err;
	}
	if (rc < 0) {
		guest_send_error(id, WIRE_ERR_BAD_REQUEST, NULL, "malformed exec payload");
		goto err;
	}
	if (!r->command) {
		guest_send_error(id, WIRE_ERR_BAD_REQUEST, "command", "command is required");
		goto err;
	}
	if (!r->rows != !r->cols) {
		guest_send_error(id, WIRE_ERR_BAD_REQUEST, "rows",
				 "a terminal needs rows and cols");
		goto err;
	}
	if (r->rows && env_default_set(r, "TERM", "xterm-256color") < 0)
		goto err_nomem;
	if (!r->cwd && !(r->cwd = strdup(DEFAULT_CWD)))
		goto err_nomem;
	return 0;

err_nomem:
	guest_send_error(id, WIRE_ERR_SPAWN, NULL, "guest out of memory");
err:
	exec_req_release(r);
	return -1;
}

/* The user's login shell from /etc/passwd (its 7th field) into out; "/bin/sh"
 * when it has none or it cannot be run. */
static void passwd_shell(const char *name, char *out, size_t cap)
{
	char line[512];
	size_t nlen = strlen(name);
	FILE *f = fopen("/etc/passwd", "re");

	snprintf(out, cap, "/bin/sh");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *p = line;

		if (strncmp(line, name, nlen) != 0 || line[nlen] != ':')
			continue;
		line[strcspn(line, "\n")] = '\0';
		for (int i = 0; i < 6 && p; i++) {
			p = strchr(p, ':');
			if (p)
				p++;
		}
		if (p && p[0] == '/' && access(p, X_OK) == 0)
			snprintf(out, cap, "%s", p);
		break;
	}
	fclose(f);
}

/* A terminal's child (v5): the session leader with the pty's slave as its
 * controlling terminal and fds 0-2, then (as exec_child) the user, the cwd,
 * and the login shell ("-sh": argv[0] with a dash). Never returns. */
static void __attribute__((noreturn))
pty_child(const struct exec_req *r, int procs_fd, int slave_fd, const char *shell, char *arg0)
{
	static const char m[] = "sandboxd-init: cannot start the login shell\n";
	char *argv[] = {arg0, NULL};
	sigset_t none;

	sigemptyset(&none);
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			signal(sig, SIG_DFL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();
	if (procs_fd >= 0 && write(procs_fd, "0", 1) < 0) {
		/* stays in the parent's cgroup: the pgid kill still works */
	}
	if (ioctl(slave_fd, TIOCSCTTY, 0) < 0 || dup2(slave_fd, 0) < 0 || dup2(slave_fd, 1) < 0 ||
	    dup2(slave_fd, 2) < 0)
		_exit(126);
	if (slave_fd > 2)
		close(slave_fd);
	if (r->as_user && (setgroups(1, &r->gid) < 0 || setgid(r->gid) < 0 || setuid(r->uid) < 0))
		_exit(126);
	if (chdir(r->cwd) < 0 && chdir("/") < 0)
		_exit(126);
	execve(shell, argv, r->env);
	if (write(2, m, sizeof(m) - 1) < 0) {
	}
	_exit(127);
}

/* Open a pseudo-terminal of rows x cols: the master (non-blocking, CLOEXEC)
 * into *master, the slave (CLOEXEC, owned by the exec user) into *slave.
 * 0, or -1. */
static int pty_open(const struct exec_req *r, int *master, int *slave)
{
	struct winsize ws = {.ws_row = (unsigned short)r->rows, .ws_col = (unsigned short)r->cols};
	char name[64];
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), s;

	if (m < 0)
		return -1;
	if (unlockpt(m) < 0 || ptsname_r(m, name, sizeof(name)) != 0)
		goto err;
	s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (s < 0)
		goto err;
	if (r->as_user && fchown(s, r->uid, r->gid) < 0) {
		/* the shell still runs; it may not chmod its own tty */
	}
	ioctl(m, TIOCSWINSZ, &ws);
	fcntl(m, F_SETFL, fcntl(m, F_GETFL) | O_NONBLOCK);
	*master = m;
	*slave = s;
	return 0;

err:
	close(m);
	return -1;
}

/* The child: never returns. Only async-signal-safe calls. */
static void __attribute__((noreturn)) exec_child(const struct exec_req *r, int procs_fd, int out_w,
						 int err_w, int script_fd, int stdin_fd)
{
	static const char e2big[] = "sandboxd-init: cannot run /bin/sh: argument list too long\n";
	static const char enoent[] = "sandboxd-init: cannot run /bin/sh\n";
	sigset_t none;
	char via_script[] = ". /proc/self/fd/9";
	char *argv[] = {"sh", "-c", script_fd >= 0 ? via_script : r->command, NULL};
	int fd;

	sigemptyset(&none);
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			signal(sig, SIG_DFL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();
	if (procs_fd >= 0 && write(procs_fd, "0", 1) < 0) {
		/* stays in the parent's cgroup: the pgid kill still works */
	}
	if (dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
		_exit(126);
	if (script_fd >= 0) {
		/* dup2 clears FD_CLOEXEC, except onto itself. */
		if (script_fd == SCRIPT_FD ? fcntl(SCRIPT_FD, F_SETFD, 0) < 0
					   : dup2(script_fd, SCRIPT_FD) < 0)
			_exit(126);
	}
	fd = stdin_fd >= 0 ? stdin_fd : open("/dev/null", O_RDONLY);
	if (fd < 0 || dup2(fd, 0) < 0)
		_exit(126);
	if (fd > 2)
		close(fd);
	if (r->as_user) {
		static const char m[] = "sandboxd-init: cannot switch to the exec user\n";

		/* After joining the cgroup (root only), before chdir (as the
		 * user, so it obeys the user's permissions). */
		if (setgroups(1, &r->gid) < 0 || setgid(r->gid) < 0 || setuid(r->uid) < 0) {
			if (write(2, m, sizeof(m) - 1) < 0) {
			}
			_exit(126);
		}
	}
	if (chdir(r->cwd) < 0) {
		static const char m[] = "sandboxd-init: cannot chdir to cwd\n";

		if (write(2, m, sizeof(m) - 1) < 0) {
		}
		_exit(126);
	}
	execve("/bin/sh", argv, r->env);
	if (errno == E2BIG) {
		if (write(2, e2big, sizeof(e2big) - 1) < 0) {
		}
		_exit(126);
	}
	if (write(2, enoent, sizeof(enoent) - 1) < 0) {
	}
	_exit(127);
}

/* A command too long for one argv string goes to the shell as a script:
 * a memfd holding "exec 9<&-" (so the command does not inherit it) and the
 * command, sourced by `sh -c '. /proc/self/fd/9'` ($0 and the exit status
 * as with -c). Returns the memfd (FD_CLOEXEC), or -1. */
static int script_memfd(const char *command)
{
	static const char head[] = "exec 9<&-\n";
	size_t len = strlen(command), off = 0;
	int fd = memfd_create("sandboxd-command", MFD_CLOEXEC);

	if (fd < 0)
		return -1;
	if (write(fd, head, sizeof(head) - 1) != (ssize_t)(sizeof(head) - 1))
		goto err_close;
	while (off < len) {
		ssize_t n = write(fd, command + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			goto err_close;
		off += (size_t)n;
	}
	return fd;

err_close:
	close(fd);
	return -1;
}

/* The command's stdin (protocol v2): a sealed-size memfd holding the bytes,
 * at offset 0, so the command reads them and then EOF without a writer to
 * feed it. Returns the memfd (FD_CLOEXEC), or -1. */
static int stdin_memfd(const char *data, size_t len)
{
	size_t off = 0;
	int fd = memfd_create("sandboxd-stdin", MFD_CLOEXEC);

	if (fd < 0)
		return -1;
	while (off < len) {
		ssize_t n = write(fd, data + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			goto err_close;
		off += (size_t)n;
	}
	if (lseek(fd, 0, SEEK_SET) < 0)
		goto err_close;
	return fd;

err_close:
	close(fd);
	return -1;
}

static int pipe_nb(int fds[2])
{
	if (pipe2(fds, O_CLOEXEC) < 0)
		return -1;
	/* Only our end is non-blocking: the command writes blocking. */
	fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
	return 0;
}

/* What guest_spawn checks before it starts anything: a terminal is no
 * process, the cwd is a directory, each env entry fits execve. 0, or -1
 * after sending ERROR. */
static int spawn_check(uint32_t id, const struct exec_req *r, bool stdin_pipe)
{
	struct stat st;

	if (r->rows && stdin_pipe) {
		guest_send_error(id, WIRE_ERR_BAD_REQUEST, "rows",
				 "a process cannot be a terminal");
		return -1;
	}
	if (stat(r->cwd, &st) < 0 || !S_ISDIR(st.st_mode)) {
		guest_send_error(id, WIRE_ERR_CWD, "cwd",
				 "cwd does not exist or is not a directory");
		return -1;
	}
	for (size_t i = 0; i < r->n_env; i++) {
		if (strlen(r->env[i]) + 1 > ARG_STRLEN_MAX) {
			guest_send_error(id, WIRE_ERR_BAD_REQUEST, "env",
					 "each env entry must be shorter than 128 KiB");
			return -1;
		}
	}
	return 0;
}

/* The command's cgroup sbx-exec-<id>.<n> into c->cgroup ("" without
 * one): its cgroup.procs open for the child to join, or -1. */
static int spawn_cgroup(uint32_t id, struct guest_child *c)
{
	char path[160];
	int procs_fd = -1;

	if (!guest_cgroup_root[0])
		return -1;
	snprintf(c->cgroup, sizeof(c->cgroup), "%s/sbx-exec-%u.%llu", guest_cgroup_root, id,
		 (unsigned long long)++serial);
	if (mkdir(c->cgroup, 0755) == 0) {
		snprintf(path, sizeof(path), "%s/cgroup.procs", c->cgroup);
		procs_fd = open(path, O_WRONLY | O_CLOEXEC);
	}
	if (procs_fd < 0) {
		guest_log("cgroup %s: %s", c->cgroup, strerror(errno));
		rmdir(c->cgroup);
		c->cgroup[0] = '\0';
	}
	return procs_fd;
}

/* Decode an EXEC-shaped request (EXEC, or a PROC start) and start its
 * command in its own cgroup and session: stdout/stderr to non-blocking
 * pipes, stdin from the request's STDIN, or a pipe when `stdin_pipe` (its
 * write end non-blocking in c->in_fd), else /dev/null. 0, or -1 after
 * sending ERROR for `id`. */
int guest_spawn(uint32_t id, const uint8_t *p, size_t len, bool stdin_pipe, struct guest_child *c)
{
	struct exec_req r;
	int out[2] = {-1, -1}, err[2] = {-1, -1}, in[2] = {-1, -1}, procs_fd = -1, script_fd = -1,
	    stdin_fd = -1, pty_m = -1, pty_s = -1;
	char shell[256], arg0[258];
	const char *base;
	pid_t pid;

	memset(c, 0, sizeof(*c));
	c->in_fd = -1;
	c->pty_fd = -1;
	if (exec_req_parse(id, p, len, &r) < 0)
		return -1;
#ifdef SBX_GUEST_FUZZ
	exec_req_release(&r); /* the fuzzer checks decoding only: start nothing */
	(void)stdin_pipe;
	return -1;
#endif
	if (spawn_check(id, &r, stdin_pipe) < 0)
		goto err_req;
	if (strlen(r.command) + 1 > ARG_STRLEN_MAX && (script_fd = script_memfd(r.command)) < 0) {
		guest_send_error(id, WIRE_ERR_SPAWN, NULL, "cannot stage the command in the guest");
		goto err_req;
	}
	if (r.stdin_data && (stdin_fd = stdin_memfd(r.stdin_data, r.stdin_len)) < 0) {
		guest_send_error(id, WIRE_ERR_SPAWN, NULL, "cannot stage stdin in the guest");
		goto err_req;
	}
	if (r.rows) {
		if (pty_open(&r, &pty_m, &pty_s) < 0 ||
		    (out[0] = fcntl(pty_m, F_DUPFD_CLOEXEC, 3)) < 0) {
			guest_send_error(id, WIRE_ERR_SPAWN, NULL,
					 "cannot open a terminal in the guest");
			goto err_pipes;
		}
		passwd_shell(r.user[0] ? r.user : "root", shell, sizeof(shell));
		base = strrchr(shell, '/');
		snprintf(arg0, sizeof(arg0), "-%s", base + 1); /* login shell */
	} else if (pipe_nb(out) < 0 || pipe_nb(err) < 0 ||
		   (stdin_pipe && stdin_fd < 0 && pipe2(in, O_CLOEXEC) < 0)) {
		guest_send_error(id, WIRE_ERR_SPAWN, NULL, "cannot create pipes in the guest");
		goto err_pipes;
	}
	if (in[0] >= 0) {
		/* our end (write) non-blocking, the command reads blocking */
		fcntl(in[1], F_SETFL, fcntl(in[1], F_GETFL) | O_NONBLOCK);
		stdin_fd = in[0];
		in[0] = -1;
	}

	procs_fd = spawn_cgroup(id, c);
	c->start_ms = guest_mono_ms();
	pid = fork();
	if (pid < 0) {
		guest_send_error(id, WIRE_ERR_SPAWN, NULL, "cannot fork in the guest");
		goto err_cgroup;
	}
	if (pid == 0) {
		if (r.rows)
			pty_child(&r, procs_fd, pty_s, shell, arg0);
		exec_child(&r, procs_fd, out[1], err[1], script_fd, stdin_fd);
	}

	if (script_fd >= 0)
		close(script_fd);
	if (stdin_fd >= 0)
		close(stdin_fd);
	if (procs_fd >= 0)
		close(procs_fd);
	if (r.rows) {
		close(pty_s);
	} else {
		close(out[1]);
		close(err[1]);
	}
	c->pty_fd = pty_m;
	c->pid = pid;
	c->out_fd = out[0];
	c->err_fd = err[0];
	c->in_fd = in[1];
	c->timeout_ms = r.timeout_ms;
	c->out_cap = r.out_cap;
	c->err_cap = r.err_cap;
	c->stream = r.stream;
	exec_req_release(&r);
	return 0;

err_cgroup:
	if (procs_fd >= 0)
		close(procs_fd);
	if (c->cgroup[0])
		rmdir(c->cgroup);
err_pipes:
	if (pty_m >= 0)
		close(pty_m);
	if (pty_s >= 0)
		close(pty_s);
	for (int i = 0; i < 2; i++) {
		if (out[i] >= 0)
			close(out[i]);
		if (err[i] >= 0)
			close(err[i]);
		if (in[i] >= 0)
			close(in[i]);
	}
err_req:
	if (script_fd >= 0)
		close(script_fd);
	if (stdin_fd >= 0)
		close(stdin_fd);
	exec_req_release(&r);
	memset(c, 0, sizeof(*c));
	c->in_fd = -1;
	c->pty_fd = -1;
	return -1;
}
