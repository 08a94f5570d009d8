/* agentless/pty.c: terminals (protocol v5) on an exec connection. A
 * terminal is an exec started with pty_rows/pty_cols (exec.c sends it and
 * streams its output); here are its input, under a window of
 * AGENTLESS_PTY_WINDOW bytes past the guest's last PTY_ACK, its window
 * size, and the checks of the guest's PTY_ACKs. Locking as in exec.c.
 */
#include "agentless/agentless.h"
#include "agentless/agentless-priv.h"

#include <pthread.h>
#include <string.h>

#include "agentless/wire.h"

long agentless_pty_write(struct agentless_conn *c, uint32_t exec_id, const void *data, size_t len)
{
	struct exec *e;
	uint64_t room;
	size_t n;

	pthread_mutex_lock(&c->lock);
	e = exec_find_locked(c, exec_id);
	if (!e || !e->pty || e->killed || c->broken) {
		pthread_mutex_unlock(&c->lock);
		return -1;
	}
	room = AGENTLESS_PTY_WINDOW - (e->in_sent - e->in_acked);
	n = (size_t)SBX_MIN((uint64_t)SBX_MIN(len, (size_t)WIRE_MAX_CHUNK), room);
	e->in_sent += n;
	pthread_mutex_unlock(&c->lock);
	/* one writer per terminal: frames leave in the order counted */
	if (n > 0 && conn_send(c, WIRE_PTY_INPUT, exec_id, data, n) < 0)
		return -1;
	return (long)n;
}

int agentless_pty_resize(struct agentless_conn *c, uint32_t exec_id, uint32_t rows, uint32_t cols)
{
	uint8_t buf[32];
	struct wire_writer w;
	struct exec *e;

	if (rows < 1 || cols < 1 || rows > AGENTLESS_PTY_DIM_MAX || cols > AGENTLESS_PTY_DIM_MAX)
		return -1;
	pthread_mutex_lock(&c->lock);
	e = exec_find_locked(c, exec_id);
	if (!e || !e->pty || e->killed) {
		pthread_mutex_unlock(&c->lock);
		return -1;
	}
	pthread_mutex_unlock(&c->lock);
	wire_writer_init(&w, buf, sizeof(buf));
	wire_put_u32(&w, WIRE_T_ROWS, rows);
	wire_put_u32(&w, WIRE_T_COLS, cols);
	return conn_send(c, WIRE_PTY_RESIZE, exec_id, buf, w.len);
}

int agentless_pty_hangup(struct agentless_conn *c, uint32_t exec_id)
{
	struct exec *e;
	int rc = -1;

	pthread_mutex_lock(&c->lock);
	e = exec_find_locked(c, exec_id);
	if (e && e->pty && !e->killed) {
		/* as the backstop's KILL: one grace to answer, then it fails */
		e->killed = true;
		e->deadline_ms = sbx_mono_ms() + c->lim.backstop_grace_ms;
		rc = 0;
	}
	pthread_mutex_unlock(&c->lock);
	if (rc == 0)
		conn_send(c, WIRE_KILL, exec_id, NULL, 0);
	return rc;
}

void pty_ack_frame(struct agentless_conn *c, const struct wire_header *h, const uint8_t *p,
		   size_t len)
{
	struct wire_reader r;
	struct wire_field f;
	uint64_t acked = 0;
	bool have = false, resume;
	void (*fn)(void *);
	void *opaque;
	struct exec *e;
	int rc;

	wire_reader_init(&r, p, len);
	while ((rc = wire_next(&r, &f)) == 1) {
		if (f.tag != WIRE_T_ACKED)
			continue;
		if (wire_field_u64(&f, &acked) < 0) {
			rc = -1;
			break;
		}
		have = true;
	}
	if (rc < 0 || !have) {
		conn_violation(c, "malformed PTY_ACK for exec %u", h->id);
		return;
	}
	pthread_mutex_lock(&c->lock);
	e = exec_find_locked(c, h->id);
	if (!e) {
		bool abandoned = conn_is_abandoned(c, h->id);
		bool dropped = abandoned && conn_unsolicited_ok_locked(c);

		pthread_mutex_unlock(&c->lock);
		if (!dropped)
			conn_violation(c, "PTY_ACK for %s exec id %u",
				       abandoned ? "(flooding) abandoned" : "unknown", h->id);
		return;
	}
	if (!e->pty || acked < e->in_acked || acked > e->in_sent) {
		unsigned long long lo = e->in_acked, hi = e->in_sent;

		pthread_mutex_unlock(&c->lock);
		conn_violation(c, "exec %u: PTY_ACK %llu outside [%llu, %llu]", h->id,
			       (unsigned long long)acked, lo, hi);
		return;
	}
	e->in_acked = acked;
	fn = e->on_pty_ack;
	opaque = e->opaque;
	if (!fn) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	/* kept valid as for on_output (exec.c, output_deliver) */
	e->in_output = true;
	pthread_mutex_unlock(&c->lock);
	fn(opaque);
	pthread_mutex_lock(&c->lock);
	e->in_output = false;
	pthread_cond_broadcast(&c->cond);
	/* a resume asked for meanwhile waited for us (agentless_exec_resume) */
	resume = e->resume_wanted && e->paused;
	e->resume_wanted = false;
	if (resume)
		e->paused = false;
	pthread_mutex_unlock(&c->lock);
	if (resume)
		conn_send(c, WIRE_RESUME, h->id, NULL, 0);
}
