/* sandboxd-init: file transfer's shared parts (private to files.c and
 * tree.c; guest/init.h is the guest's interface to them).
 *
 * files.c holds the transfer slots, the request, PUT and GET and the
 * public guest_files_* calls; tree.c holds what runs a helper process
 * (tar for TAR_PUT and TAR_GET, rm -rf for a recursive DELETE) and LIST.
 */
#ifndef SBX_GUEST_FILES_PRIV_H
#define SBX_GUEST_FILES_PRIV_H

#include "guest/init.h"
#include "agentless/wire.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#define FILES_MAX   64
#define PUMP_BUDGET (1u << 20) /* bytes read per download per loop turn */
#define ERRTEXT_MAX 160

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

/* The transfers in flight and what serve.c gave guest_files_init(). */
struct files_state {
	struct gxfer x[FILES_MAX];
	guest_send_fn send;
	size_t (*queue_size)(void);
	size_t queue_soft;
	uint8_t buf[WIRE_MAX_CHUNK];
};
extern struct files_state files;

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

/* files.c */
/* ERROR for an errno of a file system call on the request's path. */
void files_send_errno(uint32_t id, int e, const char *what);
void files_send_done(const struct gxfer *x, uint64_t size, bool truncated);
void files_send_meta(struct gxfer *x, const struct stat *st, bool with_size, uint64_t size);
void files_close_fd(int *fd);
/* Free a slot: close everything, remove a partial upload, kill a helper
 * that still runs. */
void files_xfer_drop(struct gxfer *x);
/* mkdir -p of the parents of `path` (or of path itself with `self`); the
 * directories it creates belong to the user. 0, or -1 with errno. */
int files_make_parents(const char *path, const struct gxfer *x, bool self);
/* A download's credit left, and whether the outbound queue takes more. */
uint64_t files_credit(const struct gxfer *x);
bool files_queue_room(void);

/* tree.c */
/* LIST: one page of a directory, answered at once. */
void files_list_run(struct gxfer *x, const struct file_req *r);
/* TAR_PUT / TAR_GET: start tar on the directory. */
void files_tree_open(struct gxfer *x, const struct file_req *r);
/* TAR_PUT: move pending bytes into tar's stdin; take one FILE_DATA. */
void files_tar_put_flush(struct gxfer *x);
void files_tar_put_data(struct gxfer *x, const uint8_t *p, size_t len);
/* TAR_GET: read tar's stdout within credit. */
void files_tar_get_read(struct gxfer *x);
/* DELETE: a file, an empty directory, or a tree through rm -rf. */
void files_delete_run(struct gxfer *x, const struct file_req *r);
/* The helper exited and its streams are done: answer. */
void files_helper_finish(struct gxfer *x);

#endif
