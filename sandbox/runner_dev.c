/* runner_dev: the runners without a guest, beneath the executions use case
 * (execution.c picks the runner; config execution_runner, refused in
 * production):
 *   mock: runs nothing, answers a fixed line (a development deployment
 *     without a sandbox node);
 *   dev-process: the launcher as a plain host process, no isolation:
 *     1. the code in a memfd as its stdin;
 *     2. /bin/sh -c launcher in a process group of its own, cwd /tmp;
 *     3. stdout and stderr captured up to the output cap until both close
 *        or the timeout (then the group is killed: exit 137);
 *     4. reaped, what it left killed, the result filled.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox-priv.h"

int sandbox_run_mock(struct sandbox_run_result *res)
{
	static const char msg[] = "mock runner: the code was not executed (development "
				  "deployment without a sandbox node)\n";

	res->out = strdup(msg);
	res->errb = strdup("");
	if (!res->out || !res->errb)
		return -1;
	res->out_len = res->out_total = sizeof(msg) - 1;
	res->exit_code = 0;
	res->duration_ms = 0;
	return 0;
}

/* dev-process: the launcher as a plain host process, no isolation. */
struct capture {
	int fd;
	char *buf;
	size_t len, cap;
	uint64_t total;
};

static void capture_read(struct capture *c)
{
	char tmp[65536];
	ssize_t n = read(c->fd, tmp, sizeof tmp);

	if (n <= 0) {
		if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
			close(c->fd);
			c->fd = -1;
		}
		return;
	}
	c->total += (uint64_t)n;
	size_t keep = SBX_MIN((size_t)n, c->cap - c->len);
	memcpy(c->buf + c->len, tmp, keep);
	c->len += keep;
}

int sandbox_run_dev_process(const char *launcher, const char *code, size_t code_len,
			    uint32_t timeout_ms, size_t cap, struct sandbox_run_result *res,
			    struct sbx_error *err)
{
	int o[2], e[2], in = memfd_create("sbxr-code", MFD_CLOEXEC), status = 0;
	struct capture co = {.cap = cap}, ce = {.cap = cap};
	int64_t t0 = sbx_mono_ms(), deadline = t0 + timeout_ms;
	pid_t pid;

	/* 1. the code in a memfd (the launcher's stdin), two pipes */
	if (in < 0 || write(in, code, code_len) != (ssize_t)code_len ||
	    lseek(in, 0, SEEK_SET) < 0 || pipe2(o, O_CLOEXEC) < 0) {
		if (in >= 0)
			close(in);
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "cannot stage the code");
	}
	if (pipe2(e, O_CLOEXEC) < 0) {
		close(in), close(o[0]), close(o[1]);
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "cannot create pipes");
	}
	/* 2. the launcher in a process group of its own, cwd /tmp */
	pid = fork();
	if (pid == 0) {
		setpgid(0, 0);
		/* no /home/sandbox on a host: its /tmp stands for the cwd */
		if (chdir("/tmp") < 0)
			_exit(126);
		dup2(in, 0);
		dup2(o[1], 1);
		dup2(e[1], 2);
		execl("/bin/sh", "sh", "-c", launcher, (char *)NULL);
		_exit(127);
	}
	close(in), close(o[1]), close(e[1]);
	if (pid < 0) {
		close(o[0]), close(e[0]);
		return sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "cannot fork");
	}
	/* 3. capture stdout and stderr (each up to cap, counted past it)
	 *    until both close or the deadline: then the group is killed */
	co.fd = o[0];
	ce.fd = e[0];
	co.buf = malloc(cap + 1);
	ce.buf = malloc(cap + 1);
	if (!co.buf || !ce.buf)
		abort();
	for (;;) {
		struct pollfd p[2] = {{.fd = co.fd, .events = POLLIN},
				      {.fd = ce.fd, .events = POLLIN}};
		int64_t left = deadline - sbx_mono_ms();

		if (co.fd < 0 && ce.fd < 0)
			break;
		if (left <= 0) {
			res->timed_out = true;
			kill(-pid, SIGKILL);
			kill(pid, SIGKILL);
			break;
		}
		if (poll(p, 2, (int)SBX_MIN(left, 1000)) < 0 && errno != EINTR)
			break;
		if (co.fd >= 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR)))
			capture_read(&co);
		if (ce.fd >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
			capture_read(&ce);
	}
	/* 4. reap it, kill what it left, and fill the result */
	if (co.fd >= 0)
		close(co.fd);
	if (ce.fd >= 0)
		close(ce.fd);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
	}
	kill(-pid, SIGKILL); /* whatever it left behind */
	res->duration_ms = (uint32_t)(sbx_mono_ms() - t0);
	res->host_ms = SBX_MIN(res->duration_ms, timeout_ms);
	res->exit_code = res->timed_out	       ? 137
			 : WIFEXITED(status)   ? WEXITSTATUS(status)
			 : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
					       : 1;
	co.buf[co.len] = ce.buf[ce.len] = '\0';
	res->out = co.buf, res->out_len = co.len, res->out_total = co.total;
	res->errb = ce.buf, res->err_len = ce.len, res->err_total = ce.total;
	return 0;
}
