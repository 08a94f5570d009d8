/* sandboxd-init: file transfer (protocol v3, wire.h FILE_*) on the guest
 * side, driven by serve.c's poll loop.
 *
 * One slot per transfer in flight (FILES_MAX). Uploads write each FILE_DATA
 * as it arrives into a temporary file beside the target and rename it over
 * the target at FILE_END (so a reader sees the old file or the whole new
 * one, and a full disk leaves nothing behind). Downloads read the file
 * only while the host's credit (FILE_ACK + WIRE_FILE_WINDOW) and the
 * outbound queue allow, so neither side holds more than a window. Trees go
 * through `tar` as a child process (the image's busybox or GNU tar) whose
 * stdin or stdout is the transfer; `rm -rf` deletes a tree the same way
 * (tree.c, with LIST; files-priv.h is what the two share).
 * Nothing here blocks on the host; the file system calls are ordinary
 * blocking ones, as for any PID 1.
 */
#include "guest/init.h"
#include "agentless/wire.h"
#include "guest/files-priv.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

enum role { ROLE_PIPE = 0 };

struct files_state files;

/* ------------------------------------------------------------- replies */

/* ERROR for an errno of a file system call on the request's path. */
void files_send_errno(uint32_t id, int e, const char *what)
{
	char msg[ERRTEXT_MAX];

	snprintf(msg, sizeof(msg), "%s: %s", what, strerror(e));
	switch (e) {
	case ENOENT:
		guest_send_error(id, WIRE_ERR_NOT_FOUND, "path", msg);
		break;
	case EISDIR:
		guest_send_error(id, WIRE_ERR_IS_DIR, "path", msg);
		break;
	case ENOTDIR:
		guest_send_error(id, WIRE_ERR_NOT_DIR, "path", msg);
		break;
	case ENOSPC:
	case EDQUOT:
		guest_send_error(id, WIRE_ERR_NO_SPACE, NULL, msg);
		break;
	case ENOTEMPTY:
	case EEXIST:
		guest_send_error(id, WIRE_ERR_NOT_EMPTY, "path", msg);
		break;
	default:
		guest_send_error(id, WIRE_ERR_IO, NULL, msg);
		break;
	}
}

void files_send_done(const struct gxfer *x, uint64_t size, bool truncated)
{
	uint8_t b[64];
	struct wire_writer w;

	wire_writer_init(&w, b, sizeof(b));
	wire_put_u64(&w, WIRE_T_SIZE, size);
	if (x->op == WIRE_FILE_OP_PUT)
		wire_put_u32(&w, WIRE_T_MODE, x->mode);
	if (truncated)
		wire_put_u32(&w, WIRE_T_TRUNCATED, 1);
	files.send(WIRE_FILE_DONE, x->id, w.buf, w.len);
}

static void send_ack(struct gxfer *x)
{
	uint8_t b[16];
	struct wire_writer w;

	wire_writer_init(&w, b, sizeof(b));
	wire_put_u64(&w, WIRE_T_ACKED, x->got);
	files.send(WIRE_FILE_ACK, x->id, w.buf, w.len);
	x->ack_sent = x->got;
}

/* ------------------------------------------------------------- slots */

static struct gxfer *xfer_find(uint32_t id)
{
	for (unsigned i = 0; i < FILES_MAX; i++)
		if (files.x[i].used && files.x[i].id == id)
			return &files.x[i];
	return NULL;
}

static struct gxfer *xfer_new(uint32_t id, uint32_t op)
{
	for (unsigned i = 0; i < FILES_MAX; i++) {
		struct gxfer *x = &files.x[i];

		if (!x->used) {
			memset(x, 0, sizeof(*x));
			x->used = true;
			x->id = id;
			x->op = op;
			x->fd = x->pipe_fd = x->err_fd = -1;
			return x;
		}
	}
	return NULL;
}

void files_close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Free a slot: close everything, remove a partial upload, kill a helper
 * that still runs (it is reaped by serve.c's waitpid loop). */
void files_xfer_drop(struct gxfer *x)
{
	files_close_fd(&x->fd);
	files_close_fd(&x->pipe_fd);
	files_close_fd(&x->err_fd);
	if (x->tmp[0])
		unlink(x->tmp);
	if (x->pid > 0 && !x->reaped) {
		kill(-x->pid, SIGKILL);
		kill(x->pid, SIGKILL);
	}
	free(x->pend);
	memset(x, 0, sizeof(*x));
	x->fd = x->pipe_fd = x->err_fd = -1;
}

/* ------------------------------------------------------------- request */

static int req_parse(uint32_t id, const uint8_t *p, size_t len, struct file_req *r)
{
	struct wire_reader rd;
	struct wire_field f;
	uint32_t v;
	int rc;

	memset(r, 0, sizeof(*r));
	r->mode = 0644;
	wire_reader_init(&rd, p, len);
	while ((rc = wire_next(&rd, &f)) == 1) {
		int bad = 0;

		switch (f.tag) {
		case WIRE_T_FILE_OP:
			bad = wire_field_u32(&f, &r->op);
			break;
		case WIRE_T_PATH:
			if (f.len == 0 || f.len >= sizeof(r->path) || f.value[0] != '/' ||
			    memchr(f.value, '\0', f.len)) {
				guest_send_error(id, WIRE_ERR_BAD_REQUEST, "path",
						 "path must be absolute, without NUL bytes");
				return -1;
			}
			memcpy(r->path, f.value, f.len);
			r->path[f.len] = '\0';
			break;
		case WIRE_T_MODE:
			bad = wire_field_u32(&f, &r->mode) || r->mode > 07777;
			r->has_mode = true;
			break;
		case WIRE_T_USER:
			if (f.len == 0 || f.len >= sizeof(r->user) ||
			    memchr(f.value, '\0', f.len) || memchr(f.value, ':', f.len)) {
				guest_send_error(id, WIRE_ERR_BAD_REQUEST, "user",
						 "user must be a user name");
				return -1;
			}
			memcpy(r->user, f.value, f.len);
			r->user[f.len] = '\0';
			break;
		case WIRE_T_OFFSET:
			bad = wire_field_u64(&f, &r->offset);
			break;
		case WIRE_T_LENGTH:
			bad = wire_field_u64(&f, &r->length);
			r->has_length = true;
			break;
		case WIRE_T_RECURSIVE:
			bad = wire_field_u32(&f, &v) || v > 1;
			r->recursive = v == 1;
			break;
		case WIRE_T_GZIP:
			bad = wire_field_u32(&f, &v) || v > 1;
			r->gzip = v == 1;
			break;
		case WIRE_T_LIMIT:
			bad = wire_field_u32(&f, &r->limit);
			break;
		case WIRE_T_AFTER:
			bad = f.len == 0 || f.len >= sizeof(r->after) ||
			      memchr(f.value, '\0', f.len) != NULL;
			if (!bad) {
				memcpy(r->after, f.value, f.len);
				r->after[f.len] = '\0';
				r->has_after = true;
			}
			break;
		default:
			break;
		}
		if (bad) {
			guest_send_error(id, WIRE_ERR_BAD_REQUEST, NULL,
					 "a field has a bad length or value");
			return -1;
		}
	}
	if (rc < 0 || r->op < WIRE_FILE_OP_PUT || r->op > WIRE_FILE_OP_TAR_GET) {
		guest_send_error(id, WIRE_ERR_BAD_REQUEST, NULL, "malformed file request");
		return -1;
	}
	if (!r->path[0]) {
		guest_send_error(id, WIRE_ERR_BAD_REQUEST, "path", "path is required");
		return -1;
	}
	if (r->limit == 0 || r->limit > WIRE_FILE_LIST_MAX)
		r->limit = WIRE_FILE_LIST_MAX;
	return 0;
}

/* mkdir -p of the parents of `path` (or of path itself with `self`); the
 * directories it creates belong to the user. 0, or -1 with errno. */
int files_make_parents(const char *path, const struct gxfer *x, bool self)
{
	char p[PATH_MAX];
	size_t n = strlen(path);
	struct stat st;

	if (n >= sizeof(p))
		return errno = ENAMETOOLONG, -1;
	memcpy(p, path, n + 1);
	for (char *s = p + 1;; s++) {
		bool last = *s == '\0';

		if (*s != '/' && !last)
			continue;
		if (last && !self)
			break;
		*s = '\0';
		if (mkdir(p, 0755) == 0) {
			if (x->as_user && chown(p, x->uid, x->gid) < 0)
				return -1;
		} else if (errno != EEXIST) {
			return -1;
		} else if (stat(p, &st) < 0) {
			return -1;
		} else if (!S_ISDIR(st.st_mode)) {
			return errno = ENOTDIR, -1;
		}
		if (last)
			break;
		*s = '/';
	}
	return 0;
}

static int user_lookup(uint32_t id, const struct file_req *r, struct gxfer *x)
{
	char home[256];

	if (!r->user[0])
		return 0;
	if (guest_passwd_lookup(r->user, &x->uid, &x->gid, home, sizeof(home)) < 0) {
		guest_send_error(id, WIRE_ERR_SPAWN, NULL, "the exec user is not in the guest");
		return -1;
	}
	x->as_user = true;
	return 0;
}

/* ---------------------------------------------------------------- PUT */

static void put_open(struct gxfer *x, const struct file_req *r)
{
	const char *base = strrchr(r->path, '/') + 1;
	struct stat st;
	size_t dlen = (size_t)(base - r->path);
	int n;

	if (!base[0] || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
		guest_send_error(x->id, WIRE_ERR_BAD_REQUEST, "path", "path must name a file");
		goto drop;
	}
	if (files_make_parents(r->path, x, false) < 0) {
		files_send_errno(x->id, errno, "cannot create the parent directories");
		goto drop;
	}
	if (stat(r->path, &st) == 0 && S_ISDIR(st.st_mode)) {
		guest_send_error(x->id, WIRE_ERR_IS_DIR, "path", "path is a directory");
		goto drop;
	}
	n = snprintf(x->tmp, sizeof(x->tmp), "%.*s.sbx-upload-%u-XXXXXX", (int)dlen, r->path,
		     x->id);
	if (n < 0 || (size_t)n >= sizeof(x->tmp)) {
		x->tmp[0] = '\0';
		guest_send_error(x->id, WIRE_ERR_BAD_REQUEST, "path", "path is too long");
		goto drop;
	}
	x->fd = mkostemp(x->tmp, O_CLOEXEC);
	if (x->fd < 0) {
		x->tmp[0] = '\0';
		files_send_errno(x->id, errno, "cannot create the file");
		goto drop;
	}
	snprintf(x->path, sizeof(x->path), "%s", r->path);
	x->mode = r->mode;
	return;
drop:
	files_xfer_drop(x);
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void put_data(struct gxfer *x, const uint8_t *p, size_t len)
{
	x->got += len;
	if (write_all(x->fd, p, len) < 0) {
		files_send_errno(x->id, errno, "cannot write the file");
		files_xfer_drop(x);
	}
}

static void put_end(struct gxfer *x)
{
	if (x->end_size != x->got) {
		guest_send_error(x->id, WIRE_ERR_BAD_REQUEST, NULL,
				 "FILE_END size differs from the data");
		goto drop;
	}
	if (fchmod(x->fd, x->mode) < 0 || (x->as_user && fchown(x->fd, x->uid, x->gid) < 0)) {
		files_send_errno(x->id, errno, "cannot set the file's mode or owner");
		goto drop;
	}
	/* No fsync: a sandbox's disk does not outlive a guest crash, and a
	 * large file's fsync under TCG can take longer than the host's stall
	 * deadline. ext4 and tmpfs report a full disk at write(); close()
	 * is still checked for file systems that report it late. */
	if (close(x->fd) < 0) {
		x->fd = -1;
		files_send_errno(x->id, errno, "cannot write the file");
		goto drop;
	}
	x->fd = -1;
	if (rename(x->tmp, x->path) < 0) {
		files_send_errno(x->id, errno, "cannot move the file into place");
		goto drop;
	}
	x->tmp[0] = '\0';
	files_send_done(x, x->got, false);
drop:
	files_xfer_drop(x);
}

/* ---------------------------------------------------------------- GET */

void files_send_meta(struct gxfer *x, const struct stat *st, bool with_size, uint64_t size)
{
	uint8_t b[96];
	struct wire_writer w;

	wire_writer_init(&w, b, sizeof(b));
	if (with_size)
		wire_put_u64(&w, WIRE_T_SIZE, size);
	wire_put_u64(&w, WIRE_T_TOTAL, (uint64_t)st->st_size);
	wire_put_u32(&w, WIRE_T_MODE, st->st_mode & 07777);
	wire_put_u64(&w, WIRE_T_MTIME_S, st->st_mtime < 0 ? 0 : (uint64_t)st->st_mtime);
	files.send(WIRE_FILE_META, x->id, w.buf, w.len);
}

/* What a path that is not a regular file is, for NOT_REGULAR (the host
 * knows these words). */
static const char *kind_name(mode_t m)
{
	return S_ISFIFO(m)   ? "fifo"
	       : S_ISSOCK(m) ? "socket"
	       : S_ISCHR(m)  ? "character device"
	       : S_ISBLK(m)  ? "block device"
			     : "other";
}

/* A file of the kernel's pseudo-filesystems (/proc, /sys, ...) whose size
 * reads 0 while it has content made on each read: its size is unknown. */
static bool pseudo_sized(int fd, const struct stat *st)
{
	static const unsigned long magic[] = {
	    0x9fa0,	/* proc */
	    0x62656572, /* sysfs */
	    0x64626720, /* debugfs */
	    0x74726163, /* tracefs */
	    0x73636673, /* securityfs */
	    0x27e0eb,	/* cgroup */
	    0x63677270, /* cgroup2 */
	    0x62656570, /* configfs */
	    0xcafe4a11, /* bpf */
	    0x6165676c, /* pstore */
	    0xde5e81e4, /* efivarfs */
	};
	struct statfs fs;

	if (st->st_size != 0 || fstatfs(fd, &fs) < 0)
		return false;
	for (size_t i = 0; i < sizeof(magic) / sizeof(magic[0]); i++)
		if ((unsigned long)fs.f_type == magic[i])
			return true;
	return false;
}

static void get_open(struct gxfer *x, const struct file_req *r)
{
	struct stat st;
	uint64_t size;

	/* O_NONBLOCK: a FIFO must not hang PID 1 in open() */
	x->fd = open(r->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (x->fd < 0) {
		files_send_errno(x->id, errno, "cannot open the file");
		goto drop;
	}
	if (fstat(x->fd, &st) < 0) {
		files_send_errno(x->id, errno, "cannot stat the file");
		goto drop;
	}
	if (S_ISDIR(st.st_mode)) {
		guest_send_error(x->id, WIRE_ERR_IS_DIR, "path", "path is a directory");
		goto drop;
	}
	if (!S_ISREG(st.st_mode)) {
		guest_send_error(x->id, WIRE_ERR_NOT_REGULAR, "path", kind_name(st.st_mode));
		goto drop;
	}
	if (pseudo_sized(x->fd, &st)) {
		guest_send_error(x->id, WIRE_ERR_NOT_REGULAR, "path", "pseudo");
		goto drop;
	}
	size = (uint64_t)st.st_size;
	if (r->offset > size || (r->offset == size && size > 0)) {
		guest_send_error(x->id, WIRE_ERR_RANGE, "range",
				 "the range starts past the end of the file");
		goto drop;
	}
	x->left = size - r->offset;
	if (r->has_length && r->length < x->left)
		x->left = r->length;
	if (r->offset && lseek(x->fd, (off_t)r->offset, SEEK_SET) < 0) {
		files_send_errno(x->id, errno, "cannot seek");
		goto drop;
	}
	files_send_meta(x, &st, true, x->left);
	return;
drop:
	files_xfer_drop(x);
}

uint64_t files_credit(const struct gxfer *x)
{
	uint64_t lim = x->acked + WIRE_FILE_WINDOW;

	return lim > x->sent ? lim - x->sent : 0;
}

bool files_queue_room(void)
{
	return files.queue_size() < files.queue_soft;
}

/* Send what credit and queue allow; true when more could go at once. */
static bool get_pump(struct gxfer *x)
{
	size_t done = 0;

	while (x->left > 0 && files_credit(x) > 0 && files_queue_room()) {
		size_t want = sizeof(files.buf);
		ssize_t n;

		if (done >= PUMP_BUDGET)
			return true;
		if (guest_hostile_trickling()) {
			if (!guest_hostile_trickle_due())
				return false;
			want = 1;
		}
		if (want > files_credit(x))
			want = (size_t)files_credit(x);
		if (want > x->left)
			want = (size_t)x->left;
		n = read(x->fd, files.buf, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* the file shrank under us or failed: the host gets
			 * fewer bytes than META said and fails the download */
			files_send_errno(x->id, n == 0 ? EIO : errno, "cannot read the file");
			files_xfer_drop(x);
			return false;
		}
		files.send(WIRE_FILE_DATA, x->id, files.buf, (size_t)n);
		x->sent += (uint64_t)n;
		x->left -= (uint64_t)n;
		done += (size_t)n;
	}
	if (x->left == 0) {
		files_send_done(x, x->sent, false);
		files_xfer_drop(x);
	}
	return false;
}

/* ------------------------------------------------------------- public */

void guest_files_init(guest_send_fn send, size_t (*queue_size)(void), size_t queue_soft)
{
	files.send = send;
	files.queue_size = queue_size;
	files.queue_soft = queue_soft;
	for (unsigned i = 0; i < FILES_MAX; i++)
		files.x[i].fd = files.x[i].pipe_fd = files.x[i].err_fd = -1;
}

static void file_open(uint32_t id, const uint8_t *p, size_t len)
{
	struct file_req r;
	struct gxfer *x;

	if (id == 0 || xfer_find(id)) {
		guest_send_error(id, WIRE_ERR_BAD_REQUEST, "id",
				 "transfer id is zero or already in use");
		return;
	}
	if (req_parse(id, p, len, &r) < 0)
		return;
	x = xfer_new(id, r.op);
	if (!x) {
		guest_send_error(id, WIRE_ERR_BUSY, NULL,
				 "too many file transfers in this sandbox");
		return;
	}
	if (user_lookup(id, &r, x) < 0) {
		files_xfer_drop(x);
		return;
	}
#ifdef SBX_GUEST_FUZZ
	files_xfer_drop(x); /* the fuzzer checks decoding only: touch no file */
	return;
#endif
	switch (r.op) {
	case WIRE_FILE_OP_PUT:
		put_open(x, &r);
		break;
	case WIRE_FILE_OP_GET:
		get_open(x, &r);
		break;
	case WIRE_FILE_OP_LIST:
		files_list_run(x, &r);
		break;
	case WIRE_FILE_OP_DELETE:
		files_delete_run(x, &r);
		break;
	default:
		files_tree_open(x, &r);
		break;
	}
}

static bool field_u64(const uint8_t *p, size_t len, uint16_t tag, uint64_t *v)
{
	struct wire_reader rd;
	struct wire_field f;

	wire_reader_init(&rd, p, len);
	while (wire_next(&rd, &f) == 1)
		if (f.tag == tag)
			return wire_field_u64(&f, v) == 0;
	return false;
}

void guest_files_frame(uint8_t type, uint32_t id, const uint8_t *p, size_t len)
{
	struct gxfer *x;
	uint64_t v;

	if (type == WIRE_FILE_OPEN) {
		file_open(id, p, len);
		return;
	}
	x = xfer_find(id);
	if (!x)
		return; /* a transfer this guest already ended: drop */
	switch (type) {
	case WIRE_FILE_DATA:
		if (x->end_got)
			break;
		if (x->op == WIRE_FILE_OP_PUT)
			put_data(x, p, len);
		else if (x->op == WIRE_FILE_OP_TAR_PUT)
			files_tar_put_data(x, p, len);
		break;
	case WIRE_FILE_END:
		if (x->end_got || !field_u64(p, len, WIRE_T_SIZE, &v))
			break;
		x->end_got = true;
		x->end_size = v;
		if (x->op == WIRE_FILE_OP_PUT)
			put_end(x);
		else if (x->op == WIRE_FILE_OP_TAR_PUT)
			files_tar_put_flush(x);
		break;
	case WIRE_FILE_ACK:
		if (field_u64(p, len, WIRE_T_ACKED, &v) && v > x->acked && v <= x->sent)
			x->acked = v;
		break;
	case WIRE_FILE_ABORT:
		files_xfer_drop(x);
		break;
	default:
		break;
	}
}

void guest_files_acks(void)
{
	for (unsigned i = 0; i < FILES_MAX; i++) {
		struct gxfer *x = &files.x[i];

		if (x->used && x->got > x->ack_sent)
			send_ack(x);
	}
}

bool guest_files_pump(void)
{
	bool more = false;

	for (unsigned i = 0; i < FILES_MAX; i++) {
		struct gxfer *x = &files.x[i];

		if (!x->used)
			continue;
		if (x->op == WIRE_FILE_OP_GET && !guest_hostile_file_stall())
			more |= get_pump(x);
		if (x->pid > 0 && x->reaped) {
			bool ok = WIFEXITED(x->status) && WEXITSTATUS(x->status) == 0;

			/* an upload is answered once all of it arrived (or tar
			 * failed); a tar stream once all of it was sent */
			if (x->op == WIRE_FILE_OP_TAR_PUT ? !ok || (x->end_got && x->pend_len == 0)
							  : x->pipe_fd < 0)
				files_helper_finish(x);
		}
	}
	guest_files_acks();
	return more;
}

unsigned guest_files_pollfds(struct pollfd *pfd, unsigned *slot, unsigned max)
{
	unsigned n = 0;

	for (unsigned i = 0; i < FILES_MAX && n < max; i++) {
		struct gxfer *x = &files.x[i];
		short ev = 0;

		if (!x->used || x->pipe_fd < 0)
			continue;
		if (x->op == WIRE_FILE_OP_TAR_PUT && x->pend_len > 0)
			ev = POLLOUT;
		if (x->op == WIRE_FILE_OP_TAR_GET && files_credit(x) > 0 && files_queue_room() &&
		    !guest_hostile_file_stall())
			ev = POLLIN;
		if (!ev)
			continue;
		pfd[n] = (struct pollfd){.fd = x->pipe_fd, .events = ev};
		slot[n] = i;
		n++;
	}
	return n;
}

void guest_files_ready(unsigned slot)
{
	struct gxfer *x = &files.x[slot];

	if (!x->used)
		return;
	if (x->op == WIRE_FILE_OP_TAR_PUT)
		files_tar_put_flush(x);
	else if (x->op == WIRE_FILE_OP_TAR_GET)
		files_tar_get_read(x);
}

bool guest_files_reaped(pid_t pid, int status)
{
	for (unsigned i = 0; i < FILES_MAX; i++) {
		struct gxfer *x = &files.x[i];

		if (x->used && x->pid == pid && !x->reaped) {
			x->reaped = true;
			x->status = status;
			return true;
		}
	}
	return false;
}

void guest_files_disconnected(void)
{
	for (unsigned i = 0; i < FILES_MAX; i++)
		if (files.x[i].used)
			files_xfer_drop(&files.x[i]);
}
