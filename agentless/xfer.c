/* agentless/xfer.c: file transfer over the exec channel (protocol v3), the
 * host side. See agentless.h ("file transfer") for the contract and wire.h
 * for the frames.
 *
 * Locking: conn->lock guards the conn's list of transfers (membership,
 * the `aborted` tail state); each transfer's `mu` guards the rest of it
 * and is a leaf taken after conn->lock, never before. Frames are sent and
 * wakes called with neither held. A transfer is reference-counted (the
 * conn's list holds one, the caller's handle one, a frame being handled a
 * temporary one), so a wake never runs on freed memory.
 *
 * The guest is hostile: data past the credit the host granted, past the
 * size the guest announced, for an upload, a FILE_ACK past what was sent,
 * an entry past the LIST limit or a name longer than NAME_MAX are protocol
 * violations. A guest that just stops (no data while it has credit, no
 * answer) fails only that transfer, at xfer_stall_ms.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentless/agentless-priv.h"

#define MOD "agentless"
/* Transfers in flight per connection; more -> SBX_E_RATE_LIMITED. */
#define XFER_MAX 32
/* Listed at most, aborted ones included (they leave within
 * XFER_ABORT_KEEP_MS). */
#define XFER_LISTED_MAX	   (2 * XFER_MAX)
#define XFER_STALL_DEFAULT 30000
/* An aborted transfer stays listed this long, absorbing the frames the
 * guest had in flight (up to its credit plus XFER_LATE_FRAMES others). */
#define XFER_ABORT_KEEP_MS 10000
#define XFER_LATE_FRAMES   64
/* A download grants more credit once the caller read this much. */
#define XFER_ACK_STEP  (WIRE_FILE_WINDOW / 4)
#define ENTRY_NAME_MAX 255
#define MSG_STALL      "the sandbox's guest stalled the file transfer"
#define MSG_OLD_VERSION                                                                            \
	"this sandbox's guest speaks exec protocol v%u, which has no file transfer; create a new " \
	"sandbox"

_Static_assert(AGENTLESS_FILE_WINDOW == WIRE_FILE_WINDOW, "one window");
_Static_assert(AGENTLESS_FILE_LIST_MAX == WIRE_FILE_LIST_MAX, "one list cap");
_Static_assert(WIRE_FILE_OP_PUT == 1 && WIRE_FILE_OP_TAR_GET == 6, "sandbox.h's op values");
_Static_assert(WIRE_FTYPE_FILE == 1 && WIRE_FTYPE_OTHER == 4, "sandbox.h's type values");

struct agentless_xfer {
	struct agentless_xfer *next; /* conn->xfers; conn->lock */
	uint32_t id;
	uint32_t op;
	agentless_xfer_wake_fn wake;
	void *opaque;
	uint32_t stall_ms;

	/* conn->lock */
	bool listed;
	bool aborted; /* only absorbing late frames */
	int64_t aborted_at_ms;
	uint64_t late_bytes; /* data the guest may still have in flight */
	unsigned late_frames;

	pthread_mutex_t mu;
	pthread_cond_t cond; /* waking drops to 0 */
	int refs;
	unsigned waking;
	bool released;

	enum agentless_xfer_state state;
	struct sbx_error err;
	int64_t progress_ms; /* last sign of life while waiting on the guest */

	/* upload */
	uint64_t sent, acked;
	bool end_sent;

	/* download */
	uint64_t max_bytes;
	bool have_meta;
	uint64_t size, total, mtime_s;
	uint32_t mode;
	uint8_t *ring; /* WIRE_FILE_WINDOW bytes, allocated at the first data */
	size_t ring_head, ring_len;
	uint64_t received, consumed, ack_sent;

	/* LIST */
	struct agentless_file_entry *entries;
	size_t n_entries, cap_entries;
	uint32_t list_limit;

	/* DONE */
	uint64_t done_size;
	uint32_t done_mode;
	bool truncated;
};

static bool op_is_upload(uint32_t op)
{
	return op == WIRE_FILE_OP_PUT || op == WIRE_FILE_OP_TAR_PUT;
}

static bool op_is_download(uint32_t op)
{
	return op == WIRE_FILE_OP_GET || op == WIRE_FILE_OP_TAR_GET;
}

/* Drop one reference (mu not held); frees at 0. */
static void xfer_unref(struct agentless_xfer *x)
{
	bool last;

	pthread_mutex_lock(&x->mu);
	last = --x->refs == 0;
	pthread_mutex_unlock(&x->mu);
	if (!last)
		return;
	for (size_t i = 0; i < x->n_entries; i++)
		free(x->entries[i].name);
	free(x->entries);
	free(x->ring);
	pthread_cond_destroy(&x->cond);
	pthread_mutex_destroy(&x->mu);
	free(x);
}

/* Call the owner's wake unless it released its handle. No lock held. */
static void xfer_wake(struct agentless_xfer *x)
{
	bool run;

	pthread_mutex_lock(&x->mu);
	run = !x->released && x->wake;
	if (run)
		x->waking++;
	pthread_mutex_unlock(&x->mu);
	if (!run)
		return;
	x->wake(x->opaque);
	pthread_mutex_lock(&x->mu);
	if (--x->waking == 0)
		pthread_cond_broadcast(&x->cond);
	pthread_mutex_unlock(&x->mu);
}

/* Set FAILED once (mu held). */
static void xfer_fail_locked(struct agentless_xfer *x, const struct sbx_error *err)
{
	if (x->state != AGENTLESS_XFER_OPEN)
		return;
	x->state = AGENTLESS_XFER_FAILED;
	x->err = *err;
}

/* Transfers in flight (not aborted). conn->lock held. */
static unsigned xfer_active_locked(struct agentless_conn *c)
{
	unsigned n = 0;

	for (struct agentless_xfer *x = c->xfers; x; x = x->next)
		n += !x->aborted;
	return n;
}

struct agentless_xfer *xfer_find_locked(struct agentless_conn *c, uint32_t id)
{
	for (struct agentless_xfer *x = c->xfers; x; x = x->next)
		if (x->id == id)
			return x;
	return NULL;
}

static void xfer_unlink_locked(struct agentless_conn *c, struct agentless_xfer *x)
{
	for (struct agentless_xfer **pp = &c->xfers; *pp; pp = &(*pp)->next) {
		if (*pp == x) {
			*pp = x->next;
			x->next = NULL;
			x->listed = false;
			c->n_xfers--;
			return;
		}
	}
}

/* Keep x listed as aborted (its late frames are dropped), conn->lock held.
 * The list's reference stays. */
static void xfer_mark_aborted_locked(struct agentless_xfer *x, int64_t now_ms)
{
	x->aborted = true;
	x->aborted_at_ms = now_ms;
	x->late_bytes = WIRE_FILE_WINDOW;
	x->late_frames = 0;
}

static void send_abort(struct agentless_conn *c, uint32_t id)
{
	conn_send(c, WIRE_FILE_ABORT, id, NULL, 0);
}

void xfer_fail_list(struct agentless_xfer *list, const struct sbx_error *err)
{
	while (list) {
		struct agentless_xfer *next = list->next;

		list->next = NULL;
		list->listed = false;
		pthread_mutex_lock(&list->mu);
		xfer_fail_locked(list, err);
		pthread_mutex_unlock(&list->mu);
		xfer_wake(list);
		xfer_unref(list);
		list = next;
	}
}

/* ------------------------------------------------------------ receiving */

static void send_ack(struct agentless_conn *c, uint32_t id, uint64_t acked)
{
	uint8_t b[16];
	struct wire_writer w;

	wire_writer_init(&w, b, sizeof b);
	wire_put_u64(&w, WIRE_T_ACKED, acked);
	conn_send(c, WIRE_FILE_ACK, id, b, w.len);
}

static int field_u64(const uint8_t *p, size_t len, uint16_t tag, uint64_t *v, bool *have)
{
	struct wire_reader r;
	struct wire_field f;
	int rc;

	*have = false;
	wire_reader_init(&r, p, len);
	while ((rc = wire_next(&r, &f)) == 1) {
		if (f.tag != tag)
			continue;
		if (wire_field_u64(&f, v) < 0)
			return -1;
		*have = true;
	}
	return rc;
}

static void ring_put(struct agentless_xfer *x, const uint8_t *p, size_t len)
{
	size_t tail = (x->ring_head + x->ring_len) % WIRE_FILE_WINDOW;
	size_t first = SBX_MIN(len, (size_t)WIRE_FILE_WINDOW - tail);

	memcpy(x->ring + tail, p, first);
	memcpy(x->ring, p + first, len - first);
	x->ring_len += len;
}

static size_t ring_get(struct agentless_xfer *x, uint8_t *out, size_t max)
{
	size_t n = SBX_MIN(max, x->ring_len);
	size_t first = SBX_MIN(n, (size_t)WIRE_FILE_WINDOW - x->ring_head);

	memcpy(out, x->ring + x->ring_head, first);
	memcpy(out + first, x->ring, n - first);
	x->ring_head = (x->ring_head + n) % WIRE_FILE_WINDOW;
	x->ring_len -= n;
	return n;
}

/* Outcome of one frame for a live transfer, decided under x->mu. */
struct verdict {
	char violation[160]; /* non-empty: break the connection */
	bool final;	     /* the transfer ended (unlink it) */
	bool abort;	     /* the host gives it up: FILE_ABORT */
};

static void on_data(struct agentless_xfer *x, const uint8_t *p, size_t len, struct verdict *v)
{
	if (!op_is_download(x->op) || !x->have_meta) {
		snprintf(v->violation, sizeof v->violation, "FILE_DATA for transfer %u", x->id);
		return;
	}
	if (x->received + len > x->ack_sent + WIRE_FILE_WINDOW) {
		snprintf(v->violation, sizeof v->violation,
			 "transfer %u: data past the credit the host gave", x->id);
		return;
	}
	if (x->size != UINT64_MAX && x->received + len > x->size) {
		snprintf(v->violation, sizeof v->violation,
			 "transfer %u: data past the size the guest announced", x->id);
		return;
	}
	if (x->state != AGENTLESS_XFER_OPEN)
		return;
	if (x->max_bytes && x->received + len > x->max_bytes) {
		struct sbx_error e;

		sbx_error_clear(&e);
		sbx_error_set(&e, SBX_E_PAYLOAD_TOO_LARGE, NULL,
			      "the download is larger than max_file_bytes (%llu bytes)",
			      (unsigned long long)x->max_bytes);
		xfer_fail_locked(x, &e);
		v->final = v->abort = true;
		return;
	}
	if (!x->ring && !(x->ring = malloc(WIRE_FILE_WINDOW)))
		abort();
	ring_put(x, p, len);
	x->received += len;
}

static void on_meta(struct agentless_xfer *x, const uint8_t *p, size_t len, struct verdict *v)
{
	struct wire_reader r;
	struct wire_field f;
	bool have_size = false;
	int rc;

	if (!op_is_download(x->op) || x->have_meta) {
		snprintf(v->violation, sizeof v->violation, "FILE_META for transfer %u", x->id);
		return;
	}
	x->size = UINT64_MAX;
	wire_reader_init(&r, p, len);
	while ((rc = wire_next(&r, &f)) == 1) {
		int bad = 0;

		if (f.tag == WIRE_T_SIZE) {
			bad = wire_field_u64(&f, &x->size);
			have_size = true;
		} else if (f.tag == WIRE_T_TOTAL) {
			bad = wire_field_u64(&f, &x->total);
		} else if (f.tag == WIRE_T_MODE) {
			bad = wire_field_u32(&f, &x->mode) || x->mode > 07777;
		} else if (f.tag == WIRE_T_MTIME_S) {
			bad = wire_field_u64(&f, &x->mtime_s);
		}
		if (bad)
			rc = -1;
		if (rc < 0)
			break;
	}
	if (rc < 0 || (x->op == WIRE_FILE_OP_GET) != have_size ||
	    (have_size && x->size > x->total)) {
		snprintf(v->violation, sizeof v->violation, "malformed FILE_META for transfer %u",
			 x->id);
		return;
	}
	x->have_meta = true;
	if (x->max_bytes && have_size && x->size > x->max_bytes &&
	    x->state == AGENTLESS_XFER_OPEN) {
		struct sbx_error e;

		sbx_error_clear(&e);
		sbx_error_set(&e, SBX_E_PAYLOAD_TOO_LARGE, "path",
			      "the file has %llu bytes, more than max_file_bytes (%llu); ask for "
			      "a part of it with a Range header",
			      (unsigned long long)x->size, (unsigned long long)x->max_bytes);
		xfer_fail_locked(x, &e);
		v->final = v->abort = true;
	}
}

static void on_entry(struct agentless_xfer *x, const uint8_t *p, size_t len, struct verdict *v)
{
	struct agentless_file_entry e = {0};
	struct wire_reader r;
	struct wire_field f;
	const uint8_t *name = NULL;
	uint32_t name_len = 0;
	int rc;

	if (x->op != WIRE_FILE_OP_LIST || x->n_entries >= x->list_limit) {
		snprintf(v->violation, sizeof v->violation,
			 "FILE_ENTRY for transfer %u past its limit", x->id);
		return;
	}
	wire_reader_init(&r, p, len);
	while ((rc = wire_next(&r, &f)) == 1) {
		int bad = 0;

		switch (f.tag) {
		case WIRE_T_NAME:
			name = f.value;
			name_len = f.len;
			break;
		case WIRE_T_FILE_TYPE:
			bad = wire_field_u32(&f, &e.type) || e.type < WIRE_FTYPE_FILE ||
			      e.type > WIRE_FTYPE_OTHER;
			break;
		case WIRE_T_SIZE:
			bad = wire_field_u64(&f, &e.size);
			break;
		case WIRE_T_MODE:
			bad = wire_field_u32(&f, &e.mode) || e.mode > 07777;
			break;
		case WIRE_T_MTIME_S:
			bad = wire_field_u64(&f, &e.mtime_s);
			break;
		default:
			break;
		}
		if (bad)
			rc = -1;
		if (rc < 0)
			break;
	}
	if (rc < 0 || !name || name_len == 0 || name_len > ENTRY_NAME_MAX ||
	    memchr(name, '\0', name_len) || memchr(name, '/', name_len) || e.type == 0) {
		snprintf(v->violation, sizeof v->violation, "malformed FILE_ENTRY for transfer %u",
			 x->id);
		return;
	}
	if (x->state != AGENTLESS_XFER_OPEN)
		return;
	if (x->n_entries == x->cap_entries) {
		size_t n = x->cap_entries ? x->cap_entries * 2 : 64;
		struct agentless_file_entry *ne = realloc(x->entries, n * sizeof(*ne));

		if (!ne)
			abort();
		x->entries = ne;
		x->cap_entries = n;
	}
	e.name = malloc(name_len + 1);
	if (!e.name)
		abort();
	memcpy(e.name, name, name_len);
	e.name[name_len] = '\0';
	x->entries[x->n_entries++] = e;
}

static void on_ack(struct agentless_xfer *x, const uint8_t *p, size_t len, struct verdict *v)
{
	uint64_t acked = 0;
	bool have;

	if (!op_is_upload(x->op) || field_u64(p, len, WIRE_T_ACKED, &acked, &have) < 0 || !have ||
	    acked > x->sent || acked < x->acked) {
		snprintf(v->violation, sizeof v->violation, "bad FILE_ACK for transfer %u", x->id);
		return;
	}
	x->acked = acked;
}

static void on_done(struct agentless_xfer *x, const uint8_t *p, size_t len, struct verdict *v)
{
	struct wire_reader r;
	struct wire_field f;
	uint32_t trunc = 0;
	bool have_size = false;
	int rc;

	wire_reader_init(&r, p, len);
	while ((rc = wire_next(&r, &f)) == 1) {
		int bad = 0;

		if (f.tag == WIRE_T_SIZE) {
			bad = wire_field_u64(&f, &x->done_size);
			have_size = true;
		} else if (f.tag == WIRE_T_MODE) {
			bad = wire_field_u32(&f, &x->done_mode) || x->done_mode > 07777;
		} else if (f.tag == WIRE_T_TRUNCATED) {
			bad = wire_field_u32(&f, &trunc) || trunc > 1;
		}
		if (bad)
			rc = -1;
		if (rc < 0)
			break;
	}
	v->final = true;
	if (rc < 0 || !have_size) {
		snprintf(v->violation, sizeof v->violation, "malformed FILE_DONE for transfer %u",
			 x->id);
		return;
	}
	/* what the guest says it did must match what the host saw */
	if ((op_is_download(x->op) && (!x->have_meta || x->done_size != x->received ||
				       (x->size != UINT64_MAX && x->received != x->size))) ||
	    (op_is_upload(x->op) && (!x->end_sent || x->done_size != x->sent))) {
		snprintf(v->violation, sizeof v->violation,
			 "FILE_DONE for transfer %u does not match its data", x->id);
		return;
	}
	x->truncated = trunc == 1;
	if (x->state == AGENTLESS_XFER_OPEN)
		x->state = AGENTLESS_XFER_DONE;
}

/* NOT_REGULAR: 400 naming what the path is (only words the host knows
 * reach the tenant). */
static void not_regular(const char *what, struct sbx_error *e)
{
	static const char *const known[] = {"fifo", "socket", "character device", "block device"};

	if (strcmp(what, "pseudo") == 0) {
		sbx_error_set(e, SBX_E_INVALID_REQUEST, "path",
			      "not a regular file: a file of the kernel's pseudo-filesystems "
			      "(/proc, /sys) whose size is unknown; read it with exec");
		return;
	}
	for (size_t i = 0; i < SBX_ARRAY_SIZE(known); i++)
		if (strcmp(what, known[i]) == 0) {
			sbx_error_set(e, SBX_E_INVALID_REQUEST, "path", "not a regular file: %s",
				      known[i]);
			return;
		}
	sbx_error_set(e, SBX_E_INVALID_REQUEST, "path", "not a regular file");
}

static void on_error(struct agentless_xfer *x, const uint8_t *p, size_t len, struct verdict *v)
{
	uint32_t kind = 0;
	char msg[GUEST_TEXT_MAX + 1] = "";
	struct sbx_error e;
	int rc;

	rc = conn_error_parse(p, len, &kind, NULL, 0, msg, sizeof msg);
	v->final = true;
	if (rc < 0) {
		snprintf(v->violation, sizeof v->violation, "malformed ERROR for transfer %u",
			 x->id);
		return;
	}
	sbx_error_clear(&e);
	switch (kind) {
	case WIRE_ERR_NOT_FOUND:
		sbx_error_set(&e, SBX_E_FILE_NOT_FOUND, "path",
			      "no such file or directory in the sandbox");
		break;
	case WIRE_ERR_IS_DIR:
		sbx_error_set(&e, SBX_E_INVALID_REQUEST, "path",
			      "path is a directory; a file was expected (download a directory "
			      "with format=tar)");
		break;
	case WIRE_ERR_NOT_DIR:
		sbx_error_set(&e, SBX_E_INVALID_REQUEST, "path",
			      "path (or one of its parents) is a file; a directory was expected");
		break;
	case WIRE_ERR_NO_SPACE:
		sbx_error_set(&e, SBX_E_INSUFFICIENT_STORAGE, NULL,
			      "the sandbox's disk is full; nothing was written");
		break;
	case WIRE_ERR_NOT_EMPTY:
		sbx_error_set(&e, SBX_E_INVALID_REQUEST, "recursive",
			      "the directory is not empty; pass recursive=true to delete it "
			      "with its contents");
		break;
	case WIRE_ERR_RANGE:
		sbx_error_set(&e, SBX_E_RANGE_NOT_SATISFIABLE, "range",
			      "the range starts past the end of the file");
		break;
	case WIRE_ERR_NOT_REGULAR:
		not_regular(msg, &e);
		break;
	case WIRE_ERR_BAD_REQUEST:
		sbx_error_set(&e, SBX_E_INVALID_REQUEST, "path", "the sandbox refused the path: %s",
			      msg[0] ? msg : "bad request");
		break;
	case WIRE_ERR_BUSY:
		sbx_error_set(&e, SBX_E_RATE_LIMITED, NULL,
			      "the sandbox runs too many file transfers at once; retry shortly");
		e.retry_after_s = 1;
		break;
	default:
		sbx_error_set(&e, SBX_E_SANDBOX_ERROR, NULL, "the sandbox could not do it: %s",
			      msg[0] ? msg : "failed");
		break;
	}
	xfer_fail_locked(x, &e);
}

/* A frame for an aborted transfer: dropped while within what the guest
 * may have had in flight. True when tolerated. conn->lock held. */
static bool late_ok_locked(struct agentless_conn *c, struct agentless_xfer *x,
			   const struct wire_header *h)
{
	if (h->type == WIRE_FILE_DATA && h->len <= x->late_bytes) {
		x->late_bytes -= h->len;
		return true;
	}
	if (x->late_frames < XFER_LATE_FRAMES) {
		x->late_frames++;
		return true;
	}
	return conn_unsolicited_ok_locked(c);
}

bool xfer_frame(struct agentless_conn *c, const struct wire_header *h, const uint8_t *p, size_t len)
{
	struct verdict v = {0};
	struct agentless_xfer *x;
	bool is_file = h->type >= WIRE_FILE_OPEN && h->type <= WIRE_FILE_ABORT;

	if (!is_file && h->type != WIRE_ERROR)
		return false;
	if (h->type == WIRE_FILE_OPEN || h->type == WIRE_FILE_END || h->type == WIRE_FILE_ABORT) {
		conn_violation(c, "host-only frame type %u from the guest", h->type);
		return true;
	}
	pthread_mutex_lock(&c->lock);
	x = xfer_find_locked(c, h->id);
	if (!x) {
		bool abandoned = conn_is_abandoned(c, h->id);
		bool dropped = abandoned && is_file && conn_unsolicited_ok_locked(c);

		pthread_mutex_unlock(&c->lock);
		if (!is_file)
			return false; /* an exec's ERROR, or a violation agentless.c reports */
		if (!dropped)
			conn_violation(c, "frame type %u for %s transfer id %u", h->type,
				       abandoned ? "(flooding) abandoned" : "unknown", h->id);
		return true;
	}
	if (x->aborted) {
		bool ok = late_ok_locked(c, x, h);

		if (ok && (h->type == WIRE_FILE_DONE || h->type == WIRE_ERROR)) {
			xfer_unlink_locked(c, x);
			conn_abandon(c, x->id);
			pthread_mutex_unlock(&c->lock);
			xfer_unref(x);
			return true;
		}
		pthread_mutex_unlock(&c->lock);
		if (!ok)
			conn_violation(c, "a flood of frames for aborted transfer %u", h->id);
		return true;
	}
	pthread_mutex_lock(&x->mu);
	x->refs++; /* for the wake below */
	x->progress_ms = sbx_mono_ms();
	switch (h->type) {
	case WIRE_FILE_DATA:
		on_data(x, p, len, &v);
		break;
	case WIRE_FILE_META:
		on_meta(x, p, len, &v);
		break;
	case WIRE_FILE_ENTRY:
		on_entry(x, p, len, &v);
		break;
	case WIRE_FILE_ACK:
		on_ack(x, p, len, &v);
		break;
	case WIRE_FILE_DONE:
		on_done(x, p, len, &v);
		break;
	case WIRE_ERROR:
		on_error(x, p, len, &v);
		break;
	default:
		snprintf(v.violation, sizeof v.violation, "frame type %u for transfer %u", h->type,
			 x->id);
		break;
	}
	pthread_mutex_unlock(&x->mu);
	if (v.violation[0]) {
		pthread_mutex_unlock(&c->lock);
		conn_violation(c, "%s", v.violation); /* fails x with the rest */
		xfer_unref(x);
		return true;
	}
	if (v.final && v.abort) {
		xfer_mark_aborted_locked(x, sbx_mono_ms());
	} else if (v.final) {
		xfer_unlink_locked(c, x);
		xfer_unref(x); /* the list's; ours keeps x */
	}
	pthread_mutex_unlock(&c->lock);
	if (v.abort)
		send_abort(c, h->id);
	xfer_wake(x);
	xfer_unref(x);
	return true;
}

/* -------------------------------------------------------------- public */

int agentless_xfer_start(struct agentless_conn *c, const struct agentless_file_req *req,
			 agentless_xfer_wake_fn wake, void *opaque, struct agentless_xfer **out,
			 struct sbx_error *err)
{
	uint8_t *payload;
	struct wire_writer w;
	struct agentless_xfer *x;
	size_t plen, cap;
	uint32_t id;
	int rc;

	if (!req || !req->path || req->op < WIRE_FILE_OP_PUT || req->op > WIRE_FILE_OP_TAR_GET)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "bad file request");
	plen = strlen(req->path);
	if (req->path[0] != '/' || plen >= 4096)
		return sbx_error_set(err, SBX_E_INVALID_REQUEST, "path",
				     "path must be an absolute path shorter than 4096 bytes");
	cap = plen + (req->user ? strlen(req->user) : 0) +
	      (req->list_after ? strlen(req->list_after) : 0) + 256;
	payload = calloc(1, cap);
	x = calloc(1, sizeof(*x));
	if (!payload || !x)
		abort();
	wire_writer_init(&w, payload, cap);
	wire_put_u32(&w, WIRE_T_FILE_OP, req->op);
	wire_put_str(&w, WIRE_T_PATH, req->path);
	if (req->op == WIRE_FILE_OP_PUT)
		wire_put_u32(&w, WIRE_T_MODE, req->mode & 07777);
	if (req->user)
		wire_put_str(&w, WIRE_T_USER, req->user);
	if (req->offset)
		wire_put_u64(&w, WIRE_T_OFFSET, req->offset);
	if (req->length)
		wire_put_u64(&w, WIRE_T_LENGTH, req->length);
	if (req->recursive)
		wire_put_u32(&w, WIRE_T_RECURSIVE, 1);
	if (req->gzip)
		wire_put_u32(&w, WIRE_T_GZIP, 1);
	x->list_limit = req->list_limit && req->list_limit < WIRE_FILE_LIST_MAX
			    ? req->list_limit
			    : WIRE_FILE_LIST_MAX;
	if (req->op == WIRE_FILE_OP_LIST)
		wire_put_u32(&w, WIRE_T_LIMIT, x->list_limit);
	if (req->op == WIRE_FILE_OP_LIST && req->list_after)
		wire_put_str(&w, WIRE_T_AFTER, req->list_after);

	pthread_mutex_init(&x->mu, NULL);
	pthread_cond_init(&x->cond, NULL);
	x->op = req->op;
	x->wake = wake;
	x->opaque = opaque;
	x->max_bytes = req->max_bytes;
	x->refs = 2; /* the list's and the caller's */
	x->state = AGENTLESS_XFER_OPEN;

	pthread_mutex_lock(&c->lock);
	x->stall_ms = c->lim.xfer_stall_ms ? c->lim.xfer_stall_ms : XFER_STALL_DEFAULT;
	if (!c->have_ch || c->ch_eof || c->broken || !c->ready) {
		char msg[sizeof c->broken_msg];

		snprintf(msg, sizeof msg, "%s", c->broken_msg[0] ? c->broken_msg : MSG_GONE);
		pthread_mutex_unlock(&c->lock);
		rc = sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, "%s", msg);
		goto err_free;
	}
	if (c->version < 3) {
		uint32_t v = c->version;

		pthread_mutex_unlock(&c->lock);
		rc = sbx_error_set(err, SBX_E_SANDBOX_ERROR, NULL, MSG_OLD_VERSION, v);
		goto err_free;
	}
	if (xfer_active_locked(c) >= XFER_MAX || c->n_xfers >= XFER_LISTED_MAX) {
		pthread_mutex_unlock(&c->lock);
		rc = sbx_error_set(err, SBX_E_RATE_LIMITED, NULL,
				   "too many file transfers in this sandbox at once (limit %d)",
				   XFER_MAX);
		if (err)
			err->retry_after_s = 1;
		goto err_free;
	}
	do {
		id = c->next_id++;
		if (c->next_id == 0)
			c->next_id = 1;
	} while (id == 0 || conn_id_used_locked(c, id));
	x->id = id;
	x->progress_ms = sbx_mono_ms();
	x->listed = true;
	x->next = c->xfers;
	c->xfers = x;
	c->n_xfers++;
	*out = x; /* before any wake can run: a wake finds x through the list */
	pthread_mutex_unlock(&c->lock);

	rc = conn_send(c, WIRE_FILE_OPEN, id, payload, w.len);
	free(payload);
	if (rc < 0) {
		struct sbx_error e;

		sbx_error_clear(&e);
		sbx_error_set(&e, SBX_E_SANDBOX_ERROR, NULL, MSG_GONE);
		pthread_mutex_lock(&x->mu);
		xfer_fail_locked(x, &e);
		pthread_mutex_unlock(&x->mu);
	}
	return 0;

err_free:
	free(payload);
	pthread_cond_destroy(&x->cond);
	pthread_mutex_destroy(&x->mu);
	free(x);
	return rc;
}

long agentless_xfer_write(struct agentless_conn *c, struct agentless_xfer *x, const void *data,
			  size_t len)
{
	const uint8_t *p = data;
	uint64_t credit;
	size_t n, off = 0;

	pthread_mutex_lock(&x->mu);
	if (x->state != AGENTLESS_XFER_OPEN || x->end_sent || !op_is_upload(x->op)) {
		pthread_mutex_unlock(&x->mu);
		return -1;
	}
	credit = x->acked + WIRE_FILE_WINDOW - x->sent;
	n = (size_t)SBX_MIN((uint64_t)len, credit);
	x->sent += n;
	if (n)
		x->progress_ms = sbx_mono_ms();
	pthread_mutex_unlock(&x->mu);
	/* Frames of one transfer are sent by one caller thread at a time (the
	 * HTTP request's), so they stay in order. */
	while (off < n) {
		size_t k = SBX_MIN(n - off, (size_t)WIRE_MAX_CHUNK);

		if (conn_send(c, WIRE_FILE_DATA, x->id, p + off, k) < 0)
			return -1; /* the channel broke: its EOF fails x */
		off += k;
	}
	return (long)n;
}

int agentless_xfer_end(struct agentless_conn *c, struct agentless_xfer *x)
{
	uint8_t b[16];
	struct wire_writer w;
	uint64_t total;

	pthread_mutex_lock(&x->mu);
	if (x->state != AGENTLESS_XFER_OPEN || x->end_sent || !op_is_upload(x->op)) {
		pthread_mutex_unlock(&x->mu);
		return -1;
	}
	x->end_sent = true;
	x->progress_ms = sbx_mono_ms();
	total = x->sent;
	pthread_mutex_unlock(&x->mu);
	wire_writer_init(&w, b, sizeof b);
	wire_put_u64(&w, WIRE_T_SIZE, total);
	return conn_send(c, WIRE_FILE_END, x->id, b, w.len);
}

size_t agentless_xfer_read(struct agentless_conn *c, struct agentless_xfer *x, void *buf,
			   size_t max)
{
	size_t n = 0;
	uint64_t ack = 0;
	bool send = false;

	pthread_mutex_lock(&x->mu);
	if (x->ring && x->ring_len)
		n = ring_get(x, buf, max);
	x->consumed += n;
	if (x->state == AGENTLESS_XFER_OPEN && x->consumed > x->ack_sent &&
	    (x->consumed - x->ack_sent >= XFER_ACK_STEP || x->ring_len == 0)) {
		x->ack_sent = x->consumed;
		x->progress_ms = sbx_mono_ms();
		ack = x->ack_sent;
		send = true;
	}
	pthread_mutex_unlock(&x->mu);
	if (send && c)
		send_ack(c, x->id, ack);
	return n;
}

void agentless_xfer_status(struct agentless_xfer *x, struct agentless_xfer_status *st)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&x->mu);
	st->state = x->state;
	st->err = x->err;
	st->have_meta = x->have_meta;
	st->size = x->size;
	st->total = x->total;
	st->mode = x->mode;
	st->mtime_s = x->mtime_s;
	st->done_size = x->done_size;
	st->done_mode = x->done_mode;
	st->truncated = x->truncated;
	st->buffered = x->ring_len;
	st->received = x->received;
	if (x->state == AGENTLESS_XFER_OPEN && op_is_upload(x->op) && !x->end_sent)
		st->writable = x->acked + WIRE_FILE_WINDOW - x->sent;
	pthread_mutex_unlock(&x->mu);
}

const struct agentless_file_entry *agentless_xfer_entries(struct agentless_xfer *x, size_t *n)
{
	pthread_mutex_lock(&x->mu);
	*n = x->state == AGENTLESS_XFER_DONE ? x->n_entries : 0;
	pthread_mutex_unlock(&x->mu);
	return x->entries;
}

void agentless_xfer_release(struct agentless_xfer *x)
{
	if (!x)
		return;
	pthread_mutex_lock(&x->mu);
	x->released = true;
	while (x->waking > 0)
		pthread_cond_wait(&x->cond, &x->mu);
	pthread_mutex_unlock(&x->mu);
	/* an open transfer is aborted by the next tick, which holds the
	 * conn; the list's reference keeps x until then */
	xfer_unref(x);
}

/* ------------------------------------------------------------------ tick */

/* Waiting on the guest (mu held): it has credit to send, or an answer to
 * give; not when the host side (a slow HTTP client) is the one behind. */
static bool waits_on_guest_locked(const struct agentless_xfer *x)
{
	if (x->state != AGENTLESS_XFER_OPEN)
		return false;
	if (op_is_upload(x->op))
		return x->end_sent || x->sent > x->acked;
	if (op_is_download(x->op))
		return !x->have_meta || x->ack_sent + WIRE_FILE_WINDOW > x->received;
	return true; /* LIST, DELETE: the answer */
}

void xfer_tick(struct agentless_conn *c, int64_t now_ms)
{
	uint32_t abort_ids[XFER_LISTED_MAX];
	struct agentless_xfer *stalled[XFER_LISTED_MAX];
	size_t n_abort = 0, n_stalled = 0;
	struct agentless_xfer **pp;
	struct sbx_error e;

	sbx_error_clear(&e);
	sbx_error_set(&e, SBX_E_SANDBOX_ERROR, NULL, MSG_STALL);
	pthread_mutex_lock(&c->lock);
	pp = &c->xfers;
	while (*pp) {
		struct agentless_xfer *x = *pp;
		bool released, stall;

		if (x->aborted) {
			if (now_ms - x->aborted_at_ms >= XFER_ABORT_KEEP_MS) {
				*pp = x->next;
				x->next = NULL;
				x->listed = false;
				c->n_xfers--;
				conn_abandon(c, x->id);
				pthread_mutex_unlock(&c->lock);
				xfer_unref(x);
				pthread_mutex_lock(&c->lock);
				pp = &c->xfers; /* the list may have changed */
				continue;
			}
			pp = &x->next;
			continue;
		}
		pthread_mutex_lock(&x->mu);
		released = x->released;
		stall = !released && waits_on_guest_locked(x) &&
			now_ms - x->progress_ms >= (int64_t)x->stall_ms;
		if (stall) {
			xfer_fail_locked(x, &e);
			x->refs++;
		}
		pthread_mutex_unlock(&x->mu);
		if ((released || stall) && n_abort < XFER_LISTED_MAX) {
			xfer_mark_aborted_locked(x, now_ms);
			abort_ids[n_abort++] = x->id;
			if (stall)
				stalled[n_stalled++] = x;
		}
		pp = &x->next;
	}
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; i < n_abort; i++)
		send_abort(c, abort_ids[i]);
	for (size_t i = 0; i < n_stalled; i++) {
		sbx_warn(MOD, "transfer %u: the guest stalled it; aborted", stalled[i]->id);
		xfer_wake(stalled[i]);
		xfer_unref(stalled[i]);
	}
}
