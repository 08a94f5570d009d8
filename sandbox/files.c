/* sandbox/files.c: file transfer with a running sandbox (the files routes
 * of docs/api.md), over agentless' transfers.
 *
 * Who owns what: a struct sandbox_file holds its agentless transfer and a
 * ref on the sandbox's guest (fleet_guest), dropped at release, so the
 * guest's memory outlives every call. `open` is cleared by the transfer's
 * wake once it is no longer open; a call on a guest that is ending or gone
 * answers as the ended transfer would (its channel is closed: the
 * transfer was failed), so nothing here delays a delete or an expiry.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../agentless/agentless.h"
#include "../store/store.h"
#include "sandbox-priv.h"

struct sandbox_file {
	struct sandbox_svc *svc;
	struct fleet_guest *l; /* a ref of the transfer's own */
	bool open;	       /* atomic: the transfer is open (the wake clears it) */
	struct agentless_xfer *x;
	sandbox_file_wake_fn wake;
	void *opaque;
	struct sandbox_output_hold hold; /* its reply's output budget */
};

/* sandbox.h repeats agentless' numbers (api/ sees only sandbox.h) */
_Static_assert(SANDBOX_FILE_WINDOW == AGENTLESS_FILE_WINDOW, "one window");
_Static_assert(SANDBOX_FILE_LIST_MAX == AGENTLESS_FILE_LIST_MAX, "one list cap");
_Static_assert(SANDBOX_FILE_PUT == 1 && SANDBOX_FILE_TAR_GET == 6, "wire_file_op values");
_Static_assert(SANDBOX_FTYPE_FILE == 1 && SANDBOX_FTYPE_OTHER == 4, "wire_file_type values");

/* What a download or a listing refused for the output budget answers. */
static const struct sandbox_output_words file_output_words = {
    .account = "this account's replies waiting to be read (downloads, lists, command output) "
	       "are at its output budget (GET /v1/limits); retry when one has been read",
    .host = "this node is buffering too many replies right now; retry shortly",
};

static void file_wake(void *opaque)
{
	struct sandbox_file *f = opaque;
	struct agentless_xfer_status st;

	agentless_xfer_status(f->x, &st);
	if (st.state != AGENTLESS_XFER_OPEN)
		__atomic_store_n(&f->open, false, __ATOMIC_RELEASE);
	f->wake(f->opaque);
}

/* The guest for one call; NULL when the transfer or the sandbox is over
 * (the file's own ref keeps it meanwhile). */
static struct fleet_guest *file_guest(struct sandbox_file *f)
{
	if (!__atomic_load_n(&f->open, __ATOMIC_ACQUIRE) || fleet_guest_over(f->l))
		return NULL;
	return f->l;
}

static int gone(struct sandbox_file *f, struct sbx_error *err)
{
	struct sandbox_file_status st;

	sandbox_file_status(f, &st);
	if (st.state == SANDBOX_FILE_FAILED) {
		if (err)
			*err = st.err;
		return -1;
	}
	return sbx_error_set(err, SBX_E_SANDBOX_NOT_RUNNING, NULL,
			     "the sandbox ended during the file transfer");
}

int sandbox_file_start(struct sandbox_svc *svc, const char *account_id, const char *id,
		       const struct sandbox_file_req *req, sandbox_file_wake_fn wake, void *opaque,
		       struct sandbox_file **out, struct sbx_error *err)
{
	const struct sandbox_config *cfg = &svc->cfg;
	struct agentless_file_req areq = {
	    .op = (uint32_t)req->op,
	    .path = req->path,
	    .mode = req->mode,
	    .user = strcmp(cfg->exec_user, "root") == 0 ? NULL : cfg->exec_user,
	    .offset = req->offset,
	    .length = req->length,
	    .recursive = req->recursive,
	    .gzip = req->gzip,
	    .max_bytes = req->max_bytes,
	    .list_limit = req->list_limit ? req->list_limit : SANDBOX_FILE_PAGE_MAX,
	    .list_after = req->list_after,
	};
	uint64_t cost = req->op == SANDBOX_FILE_LIST
			    ? (uint64_t)areq.list_limit * SANDBOX_FILE_ENTRY_COST
			: req->op == SANDBOX_FILE_GET || req->op == SANDBOX_FILE_TAR_GET
			    ? SANDBOX_FILE_DOWNLOAD_COST
			    : 0;
	struct store_sandbox row;
	struct sandbox_file *f;
	struct fleet_guest *l;
	int64_t now = sbx_wall_ms();
	int rc;

	if (sandbox_running_row(svc, account_id, id, now, &row, err) < 0)
		return -1;
	f = calloc(1, sizeof(*f));
	if (!f)
		return sbx_error_set(err, SBX_E_INTERNAL, NULL, "out of memory");
	f->svc = svc;
	f->wake = wake;
	f->opaque = opaque;
	sandbox_output_hold_init(&f->hold, svc->output, account_id);
	if (sandbox_output_charge(&f->hold, cost, SANDBOX_OUTPUT_WITHIN, &file_output_words, err) <
	    0) {
		free(f);
		return -1;
	}

	l = sandbox_pin(svc, id, err);
	if (!l) {
		sandbox_output_release(&f->hold);
		free(f);
		return -1;
	}
	f->l = l; /* the pin becomes the transfer's ref */
	f->open = true;
	rc = agentless_xfer_start(l->conn, &areq, file_wake, f, &f->x, err);
	if (rc < 0) {
		/* ended between the pin and the start: as if after the end */
		if (fleet_guest_over(l))
			fleet_guest_usable(l, id, err);
		fleet_live_unpin(l);
		sandbox_output_release(&f->hold);
		free(f);
		return -1;
	}
	*out = f;
	return 0;
}

long sandbox_file_write(struct sandbox_file *f, const void *data, size_t len, struct sbx_error *err)
{
	struct fleet_guest *l = file_guest(f);
	long n;

	if (!l)
		return gone(f, err);
	n = agentless_xfer_write(l->conn, f->x, data, len);
	return n < 0 ? gone(f, err) : n;
}

int sandbox_file_end(struct sandbox_file *f, struct sbx_error *err)
{
	struct fleet_guest *l = file_guest(f);
	int rc;

	if (!l)
		return gone(f, err);
	rc = agentless_xfer_end(l->conn, f->x);
	return rc < 0 ? gone(f, err) : 0;
}

size_t sandbox_file_read(struct sandbox_file *f, void *buf, size_t max)
{
	struct fleet_guest *l = file_guest(f);

	/* without the guest the transfer is over: no credit to give */
	return agentless_xfer_read(l ? l->conn : NULL, f->x, buf, max);
}

void sandbox_file_status(struct sandbox_file *f, struct sandbox_file_status *out)
{
	struct agentless_xfer_status st;
	enum fleet_end ending;

	agentless_xfer_status(f->x, &st);
	memset(out, 0, sizeof(*out));
	out->state = st.state == AGENTLESS_XFER_OPEN   ? SANDBOX_FILE_OPEN
		     : st.state == AGENTLESS_XFER_DONE ? SANDBOX_FILE_DONE
						       : SANDBOX_FILE_FAILED;
	out->err = st.err;
	out->have_meta = st.have_meta;
	out->size = st.size;
	out->total = st.total;
	out->mtime_s = st.mtime_s;
	out->mode = st.mode;
	out->done_size = st.done_size;
	out->done_mode = st.done_mode;
	out->truncated = st.truncated;
	out->buffered = st.buffered;
	if (out->state != SANDBOX_FILE_FAILED)
		return;
	ending = fleet_guest_end_why(f->l);
	if (ending == FLEET_END_PAUSED) {
		sbx_error_clear(&out->err);
		sbx_error_set(&out->err, SBX_E_SANDBOX_PAUSED, NULL,
			      "the sandbox was paused during the file transfer");
		return;
	}
	/* cut short because the sandbox expired or was deleted: 410, as exec */
	if (ending == FLEET_END_EXPIRED || ending == FLEET_END_DELETED) {
		sbx_error_clear(&out->err);
		sbx_error_set(&out->err, SBX_E_SANDBOX_NOT_RUNNING, NULL,
			      "the sandbox %s during the file transfer",
			      ending == FLEET_END_EXPIRED ? "expired" : "was deleted");
	}
}

const struct agentless_file_entry *sandbox_file_entries(struct sandbox_file *f, size_t *n)
{
	return agentless_xfer_entries(f->x, n);
}

void sandbox_file_release(struct sandbox_file *f)
{
	if (!f)
		return;
	/* no wake runs after this returns */
	agentless_xfer_release(f->x);
	sandbox_output_release(&f->hold);
	fleet_guest_unref(f->l);
	free(f);
}
