/* sandboxd-init: file transfer through helper processes, and LIST
 * (protocol v3, wire.h FILE_*), for files.c.
 *
 * Trees go through `tar` as a child process (the image's busybox or GNU
 * tar) whose stdin or stdout is the transfer; `rm -rf` deletes a tree the
 * same way. A helper is reaped by serve.c's waitpid loop
 * (guest_files_reaped) and answered by files_helper_finish. LIST reads
 * one page of a directory in bounded memory and answers at once.
 */
#include "guest/init.h"
#include "agentless/wire.h"
#include "guest/files-priv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* --------------------------------------------------------------- LIST */

static uint32_t ftype(mode_t m)
{
	return S_ISREG(m)   ? WIRE_FTYPE_FILE
	       : S_ISDIR(m) ? WIRE_FTYPE_DIR
	       : S_ISLNK(m) ? WIRE_FTYPE_SYMLINK
			    : WIRE_FTYPE_OTHER;
}

/* Keep the `cap` smallest names seen (sorted, byte order) in sel[0..*n):
 * a page of a directory of any size in bounded memory. 0, or -1 (out of
 * memory). */
static int page_keep(char **sel, uint32_t *n, uint32_t cap, const char *name)
{
	uint32_t lo = 0, hi = *n;
	char *dup;

	if (*n == cap && strcmp(name, sel[*n - 1]) >= 0)
		return 0;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (strcmp(sel[mid], name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!(dup = strdup(name)))
		return -1;
	if (*n == cap)
		free(sel[--*n]);
	memmove(&sel[lo + 1], &sel[lo], (*n - lo) * sizeof(*sel));
	sel[lo] = dup;
	++*n;
	return 0;
}

/* One page: the first `limit` names after r->after in byte order, and
 * TRUNCATED when more follow (docs/api.md "Files": limit and cursor). */
void files_list_run(struct gxfer *x, const struct file_req *r)
{
	DIR *d = opendir(r->path);
	struct dirent *de;
	uint32_t n = 0, sent = 0, cap = r->limit + 1;
	char **sel = NULL;

	if (!d) {
		files_send_errno(x->id, errno, "cannot open the directory");
		goto drop;
	}
	sel = calloc(cap, sizeof(*sel));
	if (!sel) {
		files_send_errno(x->id, ENOMEM, "cannot list the directory");
		goto out;
	}
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (r->has_after && strcmp(de->d_name, r->after) <= 0)
			continue;
		if (page_keep(sel, &n, cap, de->d_name) < 0) {
			files_send_errno(x->id, ENOMEM, "cannot list the directory");
			goto out;
		}
	}
	for (uint32_t i = 0; i < n && i < r->limit; i++) {
		uint8_t b[512];
		struct wire_writer w;
		struct stat st;

		if (fstatat(dirfd(d), sel[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		wire_writer_init(&w, b, sizeof(b));
		wire_put_str(&w, WIRE_T_NAME, sel[i]);
		wire_put_u32(&w, WIRE_T_FILE_TYPE, ftype(st.st_mode));
		wire_put_u64(&w, WIRE_T_SIZE, (uint64_t)st.st_size);
		wire_put_u32(&w, WIRE_T_MODE, st.st_mode & 07777);
		wire_put_u64(&w, WIRE_T_MTIME_S, st.st_mtime < 0 ? 0 : (uint64_t)st.st_mtime);
		if (w.overflow)
			continue;
		files.send(WIRE_FILE_ENTRY, x->id, w.buf, w.len);
		sent++;
	}
	files_send_done(x, sent, n > r->limit);
out:
	for (uint32_t i = 0; sel && i < n; i++)
		free(sel[i]);
	free(sel);
	closedir(d);
drop:
	files_xfer_drop(x);
}

/* ------------------------------------------------------------- helpers */

/* Run `sh -c script sh arg` as a helper: stdin/stdout are `in`/`out` (-1 =
 * /dev/null), stderr a memfd kept in x->err_fd. 0 or -1. */
static int helper_spawn(struct gxfer *x, const char *script, const char *arg, int in, int out,
			bool as_user)
{
	static char *const envp[] = {
	    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
	    NULL};
	char *argv[] = {"sh", "-c", (char *)script, "sh", (char *)arg, NULL};
	pid_t pid;

	x->err_fd = memfd_create("sandboxd-helper-err", MFD_CLOEXEC);
	if (x->err_fd < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		sigset_t none;
		int null = open("/dev/null", O_RDWR);

		sigemptyset(&none);
		for (int sig = 1; sig < NSIG; sig++)
			if (sig != SIGKILL && sig != SIGSTOP)
				signal(sig, SIG_DFL);
		sigprocmask(SIG_SETMASK, &none, NULL);
		setsid();
		if (null < 0 || dup2(in >= 0 ? in : null, 0) < 0 ||
		    dup2(out >= 0 ? out : null, 1) < 0 || dup2(x->err_fd, 2) < 0)
			_exit(126);
		if (as_user && x->as_user &&
		    (setgroups(1, &x->gid) < 0 || setgid(x->gid) < 0 || setuid(x->uid) < 0))
			_exit(126);
		execve("/bin/sh", argv, envp);
		_exit(127);
	}
	x->pid = pid;
	return 0;
}

/* The helper's stderr, first line, printable, into msg. */
static void helper_errtext(struct gxfer *x, char *msg, size_t cap)
{
	ssize_t n = x->err_fd >= 0 ? pread(x->err_fd, msg, cap - 1, 0) : -1;

	if (n <= 0) {
		snprintf(msg, cap, "exit status %d",
			 WIFEXITED(x->status) ? WEXITSTATUS(x->status) : 128 + WTERMSIG(x->status));
		return;
	}
	msg[n] = '\0';
	msg[strcspn(msg, "\n")] = '\0';
}

/* The helper exited and its streams are done: answer. */
void files_helper_finish(struct gxfer *x)
{
	char msg[ERRTEXT_MAX];

	if (WIFEXITED(x->status) && WEXITSTATUS(x->status) == 0) {
		files_send_done(x, x->op == WIRE_FILE_OP_TAR_GET ? x->sent : x->got, false);
	} else {
		helper_errtext(x, msg, sizeof(msg));
		guest_send_error(x->id, strstr(msg, "No space") ? WIRE_ERR_NO_SPACE : WIRE_ERR_IO,
				 NULL, msg);
	}
	files_xfer_drop(x);
}

void files_tree_open(struct gxfer *x, const struct file_req *r)
{
	int fds[2] = {-1, -1};
	struct stat st;
	bool put = x->op == WIRE_FILE_OP_TAR_PUT;
	const char *script =
	    /* -o: the files are the extracting user's (as root too), not
	     * the archive's owners (GNU and busybox tar alike) */
	    put ? (r->gzip ? "exec tar -x -o -z -f - -C \"$1\"" : "exec tar -x -o -f - -C \"$1\"")
		: (r->gzip ? "exec tar -c -z -f - -C \"$1\" ." : "exec tar -c -f - -C \"$1\" .");

	if (put && files_make_parents(r->path, x, true) < 0) {
		files_send_errno(x->id, errno, "cannot create the directory");
		goto drop;
	}
	if (stat(r->path, &st) < 0) {
		files_send_errno(x->id, errno, "cannot open the directory");
		goto drop;
	}
	if (!S_ISDIR(st.st_mode)) {
		guest_send_error(x->id, WIRE_ERR_NOT_DIR, "path", "path is not a directory");
		goto drop;
	}
	if (pipe2(fds, O_CLOEXEC) < 0)
		goto err;
	if (helper_spawn(x, script, r->path, put ? fds[0] : -1, put ? -1 : fds[1], put) < 0)
		goto err;
	close(put ? fds[0] : fds[1]);
	x->pipe_fd = put ? fds[1] : fds[0];
	fcntl(x->pipe_fd, F_SETFL, fcntl(x->pipe_fd, F_GETFL) | O_NONBLOCK);
	if (!put)
		files_send_meta(x, &st, false, 0);
	return;
err:
	files_send_errno(x->id, errno, "cannot start tar");
	if (fds[0] >= 0)
		close(fds[0]);
	if (fds[1] >= 0)
		close(fds[1]);
drop:
	files_xfer_drop(x);
}

/* TAR_PUT: move pending bytes into tar's stdin. */
void files_tar_put_flush(struct gxfer *x)
{
	while (x->pend_len > 0 && x->pipe_fd >= 0) {
		ssize_t n = write(x->pipe_fd, x->pend, x->pend_len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) { /* tar closed its stdin: drop the rest */
			files_close_fd(&x->pipe_fd);
			x->got += x->pend_len;
			x->pend_len = 0;
			break;
		}
		memmove(x->pend, x->pend + n, x->pend_len - (size_t)n);
		x->pend_len -= (size_t)n;
		x->got += (uint64_t)n;
	}
	if (x->pend_len == 0 && x->end_got)
		files_close_fd(&x->pipe_fd); /* EOF for tar */
}

void files_tar_put_data(struct gxfer *x, const uint8_t *p, size_t len)
{
	if (x->pipe_fd < 0) {
		x->got += len; /* tar is gone: read and drop */
		return;
	}
	if (x->pend_len + len > WIRE_FILE_WINDOW + WIRE_MAX_CHUNK) {
		guest_send_error(x->id, WIRE_ERR_BAD_REQUEST, NULL,
				 "the host sent past its credit");
		files_xfer_drop(x);
		return;
	}
	if (!x->pend && !(x->pend = malloc(WIRE_FILE_WINDOW + WIRE_MAX_CHUNK))) {
		guest_send_error(x->id, WIRE_ERR_IO, NULL, "guest out of memory");
		files_xfer_drop(x);
		return;
	}
	memcpy(x->pend + x->pend_len, p, len);
	x->pend_len += len;
	files_tar_put_flush(x);
}

/* TAR_GET: read tar's stdout within credit. */
void files_tar_get_read(struct gxfer *x)
{
	size_t done = 0;

	while (x->pipe_fd >= 0 && files_credit(x) > 0 && files_queue_room() && done < PUMP_BUDGET) {
		size_t want = sizeof(files.buf);
		ssize_t n;

		if (want > files_credit(x))
			want = (size_t)files_credit(x);
		n = read(x->pipe_fd, files.buf, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			files_close_fd(&x->pipe_fd);
			x->eof = true;
			break;
		}
		files.send(WIRE_FILE_DATA, x->id, files.buf, (size_t)n);
		x->sent += (uint64_t)n;
		done += (size_t)n;
	}
}

/* ------------------------------------------------------------- DELETE */

void files_delete_run(struct gxfer *x, const struct file_req *r)
{
	struct stat st;

	if (strcmp(r->path, "/") == 0) {
		guest_send_error(x->id, WIRE_ERR_BAD_REQUEST, "path",
				 "the root directory cannot be deleted");
		goto drop;
	}
	if (lstat(r->path, &st) < 0) {
		files_send_errno(x->id, errno, "cannot delete");
		goto drop;
	}
	if (!S_ISDIR(st.st_mode)) {
		if (unlink(r->path) < 0) {
			files_send_errno(x->id, errno, "cannot delete");
			goto drop;
		}
		files_send_done(x, 0, false);
		goto drop;
	}
	if (!r->recursive) {
		if (rmdir(r->path) < 0) {
			files_send_errno(x->id, errno, "cannot delete the directory");
			goto drop;
		}
		files_send_done(x, 0, false);
		goto drop;
	}
	if (helper_spawn(x, "exec rm -rf -- \"$1\"", r->path, -1, -1, false) < 0) {
		files_send_errno(x->id, errno, "cannot start rm");
		goto drop;
	}
	return; /* answered when rm exits */
drop:
	files_xfer_drop(x);
}
