/* sandboxd-init: execs on the guest side (EXEC, KILL, PAUSE/RESUME, EXIT)
 * and the pipes they leave behind. serve.c's loop polls what this file
 * keeps (X: the execs' pipes, the orphans) and hands it what is ready;
 * exec-priv.h says what each part is. Single-threaded, as the loop.
 */
#include "guest/exec-priv.h"
#include "guest/init.h"
#include "agentless/wire.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

struct guest_execs X;

/* --------------------------------------------------------------- output */

static void orphan_add(int fd)
{
	if (X.n_orphans == ORPHAN_MAX) {
		/* Degenerate: thousands of background writers. The oldest
		 * loses its reader. */
		close(X.orphans[0]);
		memmove(X.orphans, X.orphans + 1, (ORPHAN_MAX - 1) * sizeof(int));
		X.n_orphans--;
	}
	X.orphans[X.n_orphans++] = fd;
}

/* Ship the batched bytes of a stream as one frame. */
static void stream_flush(const struct exec *e, struct stream *s)
{
	if (s->chunk_len && !e->detached)
		guest_frame_send(s->type, e->id, s->chunk, s->chunk_len);
	s->chunk_len = 0;
}

static void stream_read_some(struct exec *e, struct stream *s, size_t budget);

/* Read up to `budget` bytes of one stream. The part under its cap is
 * batched into WIRE_MAX_CHUNK frames (attached execs only; the tail is
 * flushed at exit, so a synchronous exec costs no extra frames), the rest
 * is read and dropped; all of it is counted. A streamed exec (v3 STREAM)
 * ships what it read at once. Closes the fd at EOF. */
void guest_stream_read(struct exec *e, struct stream *s, size_t budget)
{
	stream_read_some(e, s, budget);
	if (e->stream)
		stream_flush(e, s);
}

static void stream_read_some(struct exec *e, struct stream *s, size_t budget)
{
	size_t done = 0;

	while (s->fd >= 0 && done < budget) {
		bool ship = !e->detached && s->kept < s->cap;
		uint8_t *dst = X.scratch;
		size_t want = sizeof(X.scratch);
		ssize_t n;

		if (ship && !s->chunk && !(s->chunk = malloc(WIRE_MAX_CHUNK)))
			ship = false;
		if (ship) {
			uint64_t left = s->cap - s->kept;

			dst = s->chunk + s->chunk_len;
			want = WIRE_MAX_CHUNK - s->chunk_len;
			if (left < want)
				want = (size_t)left;
		}
		n = read(s->fd, dst, want);
		if (n > 0) {
			done += (size_t)n;
			s->total += (uint64_t)n;
			if (ship) {
				s->kept += (uint64_t)n;
				s->chunk_len += (size_t)n;
				if (s->chunk_len == WIRE_MAX_CHUNK)
					stream_flush(e, s);
			}
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		close(s->fd); /* EOF or error */
		s->fd = -1;
	}
}

/* Read and drop; 1 while the fd stays open, 0 once closed. */
int guest_orphan_read(int fd)
{
	for (size_t done = 0; done < READ_BUDGET;) {
		ssize_t n = read(fd, X.scratch, sizeof(X.scratch));

		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 1;
		close(fd);
		return 0;
	}
	return 1;
}

/* ----------------------------------------------------------------- exec */

/* SIGKILL every process of the exec (spawn.c: its cgroup, and its session's
 * process group while the sh is not reaped). */
void guest_exec_kill(struct exec *e)
{
	guest_cgroup_kill(e->cgroup, e->reaped ? 0 : e->pid);
}

static struct exec *exec_find(uint32_t id)
{
	for (unsigned i = 0; i < EXEC_MAX; i++)
		if (X.execs[i].used && !X.execs[i].detached && X.execs[i].id == id)
			return &X.execs[i];
	return NULL;
}

/* The sh exited: drain what the pipes hold, send EXIT, hand the pipes that
 * background processes still hold to the orphan set, free the slot. */
void guest_exec_finish(struct exec *e)
{
	uint8_t buf[128];
	struct wire_writer w;
	int code;
	int64_t dur = e->end_ms - e->start_ms;

	guest_stream_read(e, &e->out, DRAIN_BUDGET);
	guest_stream_read(e, &e->err, DRAIN_BUDGET);
	stream_flush(e, &e->out);
	stream_flush(e, &e->err);
	free(e->out.chunk);
	free(e->err.chunk);
	if (e->timed_out)
		code = 128 + SIGKILL;
	else if (WIFEXITED(e->status))
		code = WEXITSTATUS(e->status);
	else if (WIFSIGNALED(e->status))
		code = 128 + WTERMSIG(e->status);
	else
		code = 255;
	if (!e->detached) {
		wire_writer_init(&w, buf, sizeof(buf));
		wire_put_u32(&w, WIRE_T_EXIT_CODE, (uint32_t)code);
		wire_put_u32(&w, WIRE_T_DURATION_MS,
			     dur < 0		? 0
			     : dur > UINT32_MAX ? UINT32_MAX
						: (uint32_t)dur);
		wire_put_u32(&w, WIRE_T_TIMED_OUT, e->timed_out ? 1 : 0);
		wire_put_u64(&w, WIRE_T_STDOUT_TOTAL, e->out.total);
		wire_put_u64(&w, WIRE_T_STDERR_TOTAL, e->err.total);
		guest_frame_send(WIRE_EXIT, e->id, w.buf, w.len);
	}
	if (e->out.fd >= 0)
		orphan_add(e->out.fd);
	if (e->err.fd >= 0)
		orphan_add(e->err.fd);
	guest_pty_remove(e->pty - 1);
	guest_cgroup_release(e->cgroup);
	memset(e, 0, sizeof(*e));
	X.n_execs--;
}

static struct exec *exec_slot(void)
{
	for (unsigned i = 0; i < EXEC_MAX; i++)
		if (!X.execs[i].used)
			return &X.execs[i];
	return NULL;
}

void guest_exec_start(uint32_t id, const uint8_t *p, size_t len)
{
	struct guest_child c;
	struct exec *e;

	if (id == 0 || exec_find(id)) {
		guest_send_error(id, WIRE_ERR_BAD_REQUEST, "id",
				 "exec id is zero or already in use");
		return;
	}
	if (X.n_execs >= EXEC_MAX || !(e = exec_slot())) {
		guest_send_error(id, WIRE_ERR_BUSY, NULL,
				 "too many commands running in this sandbox");
		return;
	}
	if (guest_spawn(id, p, len, false, &c) < 0)
		return;
	memset(e, 0, sizeof(*e));
	if (c.pty_fd >= 0) {
		e->pty = guest_pty_add(id, c.pty_fd) + 1; /* 0: full, no input */
		if (!e->pty)
			close(c.pty_fd);
		c.out_cap = UINT32_MAX;
		c.stream = true;
	}
	e->used = true;
	e->id = id;
	e->pid = c.pid;
	e->start_ms = c.start_ms;
	e->deadline_ms = c.start_ms + c.timeout_ms;
	e->stream = c.stream;
	memcpy(e->cgroup, c.cgroup, sizeof(e->cgroup));
	e->out = (struct stream){.fd = c.out_fd, .type = WIRE_STDOUT, .cap = c.out_cap};
	if (e->pty)
		e->out.cap = UINT64_MAX;
	e->err = (struct stream){.fd = c.err_fd, .type = WIRE_STDERR, .cap = c.err_cap};
	X.n_execs++;
}

void guest_exec_kill_req(uint32_t id)
{
	struct exec *e = exec_find(id);

	if (!e || e->reaped)
		return;
	if (e->pty && !e->hup) {
		/* a terminal hangs up first, as when a line drops */
		e->hup = true;
		e->deadline_ms = guest_mono_ms() + KILL_RETRY_MS;
		kill(-e->pid, SIGHUP);
		return;
	}
	e->timed_out = true;
	e->deadline_ms = guest_mono_ms() + KILL_RETRY_MS;
	guest_exec_kill(e);
}

/* v3 flow control: a slow consumer of a streamed exec pauses the reading
 * of its pipes (the command then blocks writing) and resumes it. */
void guest_exec_pause_req(uint32_t id, bool paused)
{
	struct exec *e = exec_find(id);

	if (e)
		e->paused = paused;
}

void guest_exec_reap(void)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		if (guest_proc_reaped(pid, status))
			continue;
		for (unsigned i = 0; i < EXEC_MAX; i++) {
			struct exec *e = &X.execs[i];

			if (e->used && !e->reaped && e->pid == pid) {
				e->reaped = true;
				e->status = status;
				e->end_ms = guest_mono_ms();
				pid = 0;
				break;
			}
		}
		if (pid)
			guest_files_reaped(pid, status);
	}
	guest_cgroup_linger_retry();
}
