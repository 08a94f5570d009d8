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
 * stdin or stdout is the transfer; `rm -rf` deletes a tree the same way.
 * Nothing here blocks on the host; the file system calls are ordinary
 * blocking ones, as for any PID 1.
 */
#include "guest/init.h"
#include "agentless/wire.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define FILES_MAX   64
#define PUMP_BUDGET (1u << 20) /* bytes read per download per loop turn */
#define ERRTEXT_MAX 160

enum role { ROLE_PIPE = 0 };

struct gxfer {
	bool used;
	uint32_t id;
	uint32_t op;
	int fd;	      /* PUT: the temporary file; GET: the file */
	int pipe_fd;  /* TAR_PUT: tar's stdin; TAR_GET: tar's stdout */
	int err_fd;   /* a helper's stderr (memfd) */
	pid_t pid;    /* helper (tar, rm), 0 if none */
	bool reaped;  /* the helper exited */
	int status;   /* its wait status */
	bool failed;  /* PUT/TAR_PUT: bytes are read and dropped until END */
	bool end_got; /* FILE_END arrived */
	uint64_t end_size;
	uint64_t got;	   /* upload: data bytes consumed */
	uint64_t ack_sent; /* upload: last FILE_ACK sent */
	uint64_t sent;	   /* download: data bytes sent */
	uint64_t acked;	   /* download: the host's FILE_ACK */
	uint64_t left;	   /* GET: bytes still to send */
	bool eof;	   /* TAR_GET: tar's stdout ended */
	uint8_t *pend;	   /* TAR_PUT: bytes tar has not taken yet */
	size_t pend_len;
	uint32_t mode;
	bool as_user;
	uid_t uid;
	gid_t gid;
	char path[PATH_MAX];
	char tmp[PATH_MAX];
};

static struct {
	struct gxfer x[FILES_MAX];
	guest_send_fn send;
	size_t (*queue_size)(void);
	size_t queue_soft;
	uint8_t buf[WIRE_MAX_CHUNK];
} F;

struct file_req {
	uint32_t op;
	char path[PATH_MAX];
	uint32_t mode;
	bool has_mode;
	char user[64];
	uint64_t offset, length;
	bool has_length;
	bool recursive, gzip;
	uint32_t limit;
	char after[256]; /* LIST: only names after this one (byte order) */
	bool has_after;
};

/* ------------------------------------------------------------- replies */

/* ERROR for an errno of a file system call on the request's path. */
static void send_errno(uint32_t id, int e, const char *what)
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

static void send_done(const struct gxfer *x, uint64_t size, bool truncated)
{
	uint8_t b[64];
	struct wire_writer w;

	wire_writer_init(&w, b, sizeof(b));
	wire_put_u64(&w, WIRE_T_SIZE, size);
	if (x->op == WIRE_FILE_OP_PUT)
		wire_put_u32(&w, WIRE_T_MODE, x->mode);
	if (truncated)
		wire_put_u32(&w, WIRE_T_TRUNCATED, 1);
	F.send(WIRE_FILE_DONE, x->id, w.buf, w.len);
}

static void send_ack(struct gxfer *x)
{
	uint8_t b[16];
	struct wire_writer w;

	wire_writer_init(&w, b, sizeof(b));
	wire_put_u64(&w, WIRE_T_ACKED, x->got);
	F.send(WIRE_FILE_ACK, x->id, w.buf, w.len);
	x->ack_sent = x->got;
}

/* ------------------------------------------------------------- slots */

static struct gxfer *xfer_find(uint32_t id)
{
	for (unsigned i = 0; i < FILES_MAX; i++)
		if (F.x[i].used && F.x[i].id == id)
			return &F.x[i];
	return NULL;
}

static struct gxfer *xfer_new(uint32_t id, uint32_t op)
{
	for (unsigned i = 0; i < FILES_MAX; i++) {
		struct gxfer *x = &F.x[i];

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

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Free a slot: close everything, remove a partial upload, kill a helper
 * that still runs (it is reaped by serve.c's waitpid loop). */
static void xfer_drop(struct gxfer *x)
{
	close_fd(&x->fd);
	close_fd(&x->pipe_fd);
	close_fd(&x->err_fd);
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
static int make_parents(const char *path, const struct gxfer *x, bool self)
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
	if (make_parents(r->path, x, false) < 0) {
		send_errno(x->id, errno, "cannot create the parent directories");
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
		send_errno(x->id, errno, "cannot create the file");
		goto drop;
	}
	snprintf(x->path, sizeof(x->path), "%s", r->path);
	x->mode = r->mode;
	return;
drop:
	xfer_drop(x);
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
		send_errno(x->id, errno, "cannot write the file");
		xfer_drop(x);
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
		send_errno(x->id, errno, "cannot set the file's mode or owner");
		goto drop;
	}
	/* No fsync: a sandbox's disk does not outlive a guest crash, and a
	 * large file's fsync under TCG can take longer than the host's stall
	 * deadline. ext4 and tmpfs report a full disk at write(); close()
	 * is still checked for file systems that report it late. */
	if (close(x->fd) < 0) {
		x->fd = -1;
		send_errno(x->id, errno, "cannot write the file");
		goto drop;
	}
	x->fd = -1;
	if (rename(x->tmp, x->path) < 0) {
		send_errno(x->id, errno, "cannot move the file into place");
		goto drop;
	}
	x->tmp[0] = '\0';
	send_done(x, x->got, false);
drop:
	xfer_drop(x);
}

/* ---------------------------------------------------------------- GET */

static void send_meta(struct gxfer *x, const struct stat *st, bool with_size, uint64_t size)
{
	uint8_t b[96];
	struct wire_writer w;

	wire_writer_init(&w, b, sizeof(b));
	if (with_size)
		wire_put_u64(&w, WIRE_T_SIZE, size);
	wire_put_u64(&w, WIRE_T_TOTAL, (uint64_t)st->st_size);
	wire_put_u32(&w, WIRE_T_MODE, st->st_mode & 07777);
	wire_put_u64(&w, WIRE_T_MTIME_S, st->st_mtime < 0 ? 0 : (uint64_t)st->st_mtime);
	F.send(WIRE_FILE_META, x->id, w.buf, w.len);
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
		send_errno(x->id, errno, "cannot open the file");
		goto drop;
	}
	if (fstat(x->fd, &st) < 0) {
		send_errno(x->id, errno, "cannot stat the file");
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
		send_errno(x->id, errno, "cannot seek");
		goto drop;
	}
	send_meta(x, &st, true, x->left);
	return;
drop:
	xfer_drop(x);
}

static uint64_t credit(const struct gxfer *x)
{
	uint64_t lim = x->acked + WIRE_FILE_WINDOW;

	return lim > x->sent ? lim - x->sent : 0;
}

static bool queue_room(void)
{
	return F.queue_size() < F.queue_soft;
}

/* Send what credit and queue allow; true when more could go at once. */
static bool get_pump(struct gxfer *x)
{
	size_t done = 0;

	while (x->left > 0 && credit(x) > 0 && queue_room()) {
		size_t want = sizeof(F.buf);
		ssize_t n;

		if (done >= PUMP_BUDGET)
			return true;
		if (guest_hostile_trickling()) {
			if (!guest_hostile_trickle_due())
				return false;
			want = 1;
		}
		if (want > credit(x))
			want = (size_t)credit(x);
		if (want > x->left)
			want = (size_t)x->left;
		n = read(x->fd, F.buf, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* the file shrank under us or failed: the host gets
			 * fewer bytes than META said and fails the download */
			send_errno(x->id, n == 0 ? EIO : errno, "cannot read the file");
			xfer_drop(x);
			return false;
		}
		F.send(WIRE_FILE_DATA, x->id, F.buf, (size_t)n);
		x->sent += (uint64_t)n;
		x->left -= (uint64_t)n;
		done += (size_t)n;
	}
	if (x->left == 0) {
		send_done(x, x->sent, false);
		xfer_drop(x);
	}
	return false;
}

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
static void list_run(struct gxfer *x, const struct file_req *r)
{
	DIR *d = opendir(r->path);
	struct dirent *de;
	uint32_t n = 0, sent = 0, cap = r->limit + 1;
	char **sel = NULL;

	if (!d) {
		send_errno(x->id, errno, "cannot open the directory");
		goto drop;
	}
	sel = calloc(cap, sizeof(*sel));
	if (!sel) {
		send_errno(x->id, ENOMEM, "cannot list the directory");
		goto out;
	}
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (r->has_after && strcmp(de->d_name, r->after) <= 0)
			continue;
		if (page_keep(sel, &n, cap, de->d_name) < 0) {
			send_errno(x->id, ENOMEM, "cannot list the directory");
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
		F.send(WIRE_FILE_ENTRY, x->id, w.buf, w.len);
		sent++;
	}
	send_done(x, sent, n > r->limit);
out:
	for (uint32_t i = 0; sel && i < n; i++)
		free(sel[i]);
	free(sel);
	closedir(d);
drop:
	xfer_drop(x);
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
static void helper_finish(struct gxfer *x)
{
	char msg[ERRTEXT_MAX];

	if (WIFEXITED(x->status) && WEXITSTATUS(x->status) == 0) {
		send_done(x, x->op == WIRE_FILE_OP_TAR_GET ? x->sent : x->got, false);
	} else {
		helper_errtext(x, msg, sizeof(msg));
		guest_send_error(x->id, strstr(msg, "No space") ? WIRE_ERR_NO_SPACE : WIRE_ERR_IO,
				 NULL, msg);
	}
	xfer_drop(x);
}

static void tree_open(struct gxfer *x, const struct file_req *r)
{
	int fds[2] = {-1, -1};
	struct stat st;
	bool put = x->op == WIRE_FILE_OP_TAR_PUT;
	const char *script =
	    /* -o: the files are the extracting user's (as root too), not
	     * the archive's owners (GNU and busybox tar alike) */
	    put ? (r->gzip ? "exec tar -x -o -z -f - -C \"$1\"" : "exec tar -x -o -f - -C \"$1\"")
		: (r->gzip ? "exec tar -c -z -f - -C \"$1\" ." : "exec tar -c -f - -C \"$1\" .");

	if (put && make_parents(r->path, x, true) < 0) {
		send_errno(x->id, errno, "cannot create the directory");
		goto drop;
	}
	if (stat(r->path, &st) < 0) {
		send_errno(x->id, errno, "cannot open the directory");
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
		send_meta(x, &st, false, 0);
	return;
err:
	send_errno(x->id, errno, "cannot start tar");
	if (fds[0] >= 0)
		close(fds[0]);
	if (fds[1] >= 0)
		close(fds[1]);
drop:
	xfer_drop(x);
}

/* TAR_PUT: move pending bytes into tar's stdin. */
static void tar_put_flush(struct gxfer *x)
{
	while (x->pend_len > 0 && x->pipe_fd >= 0) {
		ssize_t n = write(x->pipe_fd, x->pend, x->pend_len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) { /* tar closed its stdin: drop the rest */
			close_fd(&x->pipe_fd);
			x->got += x->pend_len;
			x->pend_len = 0;
			break;
		}
		memmove(x->pend, x->pend + n, x->pend_len - (size_t)n);
		x->pend_len -= (size_t)n;
		x->got += (uint64_t)n;
	}
	if (x->pend_len == 0 && x->end_got)
		close_fd(&x->pipe_fd); /* EOF for tar */
}

static void tar_put_data(struct gxfer *x, const uint8_t *p, size_t len)
{
	if (x->pipe_fd < 0) {
		x->got += len; /* tar is gone: read and drop */
		return;
	}
	if (x->pend_len + len > WIRE_FILE_WINDOW + WIRE_MAX_CHUNK) {
		guest_send_error(x->id, WIRE_ERR_BAD_REQUEST, NULL,
				 "the host sent past its credit");
		xfer_drop(x);
		return;
	}
	if (!x->pend && !(x->pend = malloc(WIRE_FILE_WINDOW + WIRE_MAX_CHUNK))) {
		guest_send_error(x->id, WIRE_ERR_IO, NULL, "guest out of memory");
		xfer_drop(x);
		return;
	}
	memcpy(x->pend + x->pend_len, p, len);
	x->pend_len += len;
	tar_put_flush(x);
}

/* TAR_GET: read tar's stdout within credit. */
static void tar_get_read(struct gxfer *x)
{
	size_t done = 0;

	while (x->pipe_fd >= 0 && credit(x) > 0 && queue_room() && done < PUMP_BUDGET) {
		size_t want = sizeof(F.buf);
		ssize_t n;

		if (want > credit(x))
			want = (size_t)credit(x);
		n = read(x->pipe_fd, F.buf, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			close_fd(&x->pipe_fd);
			x->eof = true;
			break;
		}
		F.send(WIRE_FILE_DATA, x->id, F.buf, (size_t)n);
		x->sent += (uint64_t)n;
		done += (size_t)n;
	}
}

/* ------------------------------------------------------------- DELETE */

static void delete_run(struct gxfer *x, const struct file_req *r)
{
	struct stat st;

	if (strcmp(r->path, "/") == 0) {
		guest_send_error(x->id, WIRE_ERR_BAD_REQUEST, "path",
				 "the root directory cannot be deleted");
		goto drop;
	}
	if (lstat(r->path, &st) < 0) {
		send_errno(x->id, errno, "cannot delete");
		goto drop;
	}
	if (!S_ISDIR(st.st_mode)) {
		if (unlink(r->path) < 0) {
			send_errno(x->id, errno, "cannot delete");
			goto drop;
		}
		send_done(x, 0, false);
		goto drop;
	}
	if (!r->recursive) {
		if (rmdir(r->path) < 0) {
			send_errno(x->id, errno, "cannot delete the directory");
			goto drop;
		}
		send_done(x, 0, false);
		goto drop;
	}
	if (helper_spawn(x, "exec rm -rf -- \"$1\"", r->path, -1, -1, false) < 0) {
		send_errno(x->id, errno, "cannot start rm");
		goto drop;
	}
	return; /* answered when rm exits */
drop:
	xfer_drop(x);
}

/* ------------------------------------------------------------- public */

void guest_files_init(guest_send_fn send, size_t (*queue_size)(void), size_t queue_soft)
{
	F.send = send;
	F.queue_size = queue_size;
	F.queue_soft = queue_soft;
	for (unsigned i = 0; i < FILES_MAX; i++)
		F.x[i].fd = F.x[i].pipe_fd = F.x[i].err_fd = -1;
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
		xfer_drop(x);
		return;
	}
#ifdef SBX_GUEST_FUZZ
	xfer_drop(x); /* the fuzzer checks decoding only: touch no file */
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
		list_run(x, &r);
		break;
	case WIRE_FILE_OP_DELETE:
		delete_run(x, &r);
		break;
	default:
		tree_open(x, &r);
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
			tar_put_data(x, p, len);
		break;
	case WIRE_FILE_END:
		if (x->end_got || !field_u64(p, len, WIRE_T_SIZE, &v))
			break;
		x->end_got = true;
		x->end_size = v;
		if (x->op == WIRE_FILE_OP_PUT)
			put_end(x);
		else if (x->op == WIRE_FILE_OP_TAR_PUT)
			tar_put_flush(x);
		break;
	case WIRE_FILE_ACK:
		if (field_u64(p, len, WIRE_T_ACKED, &v) && v > x->acked && v <= x->sent)
			x->acked = v;
		break;
	case WIRE_FILE_ABORT:
		xfer_drop(x);
		break;
	default:
		break;
	}
}

void guest_files_acks(void)
{
	for (unsigned i = 0; i < FILES_MAX; i++) {
		struct gxfer *x = &F.x[i];

		if (x->used && x->got > x->ack_sent)
			send_ack(x);
	}
}

bool guest_files_pump(void)
{
	bool more = false;

	for (unsigned i = 0; i < FILES_MAX; i++) {
		struct gxfer *x = &F.x[i];

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
				helper_finish(x);
		}
	}
	guest_files_acks();
	return more;
}

unsigned guest_files_pollfds(struct pollfd *pfd, unsigned *slot, unsigned max)
{
	unsigned n = 0;

	for (unsigned i = 0; i < FILES_MAX && n < max; i++) {
		struct gxfer *x = &F.x[i];
		short ev = 0;

		if (!x->used || x->pipe_fd < 0)
			continue;
		if (x->op == WIRE_FILE_OP_TAR_PUT && x->pend_len > 0)
			ev = POLLOUT;
		if (x->op == WIRE_FILE_OP_TAR_GET && credit(x) > 0 && queue_room() &&
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
	struct gxfer *x = &F.x[slot];

	if (!x->used)
		return;
	if (x->op == WIRE_FILE_OP_TAR_PUT)
		tar_put_flush(x);
	else if (x->op == WIRE_FILE_OP_TAR_GET)
		tar_get_read(x);
}

bool guest_files_reaped(pid_t pid, int status)
{
	for (unsigned i = 0; i < FILES_MAX; i++) {
		struct gxfer *x = &F.x[i];

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
		if (F.x[i].used)
			xfer_drop(&F.x[i]);
}
