/* sandboxd-init: background processes (protocol v3, WIRE_PROC in wire.h).
 *
 * A background process is started like an exec (guest_spawn: own cgroup,
 * own session) but belongs to the guest, not to a connection: it runs
 * until it exits, is signalled, or passes its own timeout, whatever host
 * is connected, so a restarted daemon finds it (and its output) again.
 * Each of its streams is read into a ring of WIRE_PROC_RING bytes as fast
 * as it writes (never paused: the ring overwrites its oldest bytes and the
 * byte offsets keep counting, so a reader learns how many it lost). Its
 * stdin is a pipe the host writes through PROC STDIN.
 *
 * The table holds WIRE_PROC_MAX entries; the host's MAX_PROCS bounds the
 * running ones, and an ended entry is reused (oldest first) when the
 * table is full. All of it runs on serve.c's single-threaded loop. */
#include "guest/init.h"
#include "agentless/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CMD_HEAD	 256	      /* bytes of the command kept for the list */
#define PROC_READ_BUDGET (256u << 10) /* bytes per pipe per loop turn */
#define KILL_RETRY_MS	 1000

struct ring {
	int fd;		/* read end, -1 once closed */
	uint8_t *buf;	/* WIRE_PROC_RING bytes, allocated at start */
	uint64_t total; /* bytes written by the process (= end offset) */
};

struct proc {
	bool used;
	bool running;
	pid_t pid;
	int exit_code;
	int in_fd; /* write end of its stdin, -1 once closed */
	uint64_t started_ns;
	int64_t ended_mono;  /* for picking the oldest ended entry */
	int64_t deadline_ms; /* 0 = none */
	bool timed_out;
	char cmd[CMD_HEAD];
	size_t cmd_len;
	char cgroup[96];
	struct ring out, err;
};

static struct proc P[WIRE_PROC_MAX];
static uint8_t scratch[64 * 1024];

static uint64_t wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static struct proc *proc_find(uint32_t pid)
{
	for (unsigned i = 0; i < WIRE_PROC_MAX; i++)
		if (P[i].used && (uint32_t)P[i].pid == pid)
			return &P[i];
	return NULL;
}

static void ring_close(struct ring *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
}

static void proc_release(struct proc *p)
{
	ring_close(&p->out);
	ring_close(&p->err);
	if (p->in_fd >= 0)
		close(p->in_fd);
	free(p->out.buf);
	free(p->err.buf);
	if (p->cgroup[0])
		rmdir(p->cgroup); /* fails while a descendant lives on: harmless */
	memset(p, 0, sizeof(*p));
}

/* A free entry: unused, else the oldest ended one; NULL when all run. */
static struct proc *proc_slot(void)
{
	struct proc *best = NULL;

	for (unsigned i = 0; i < WIRE_PROC_MAX; i++) {
		if (!P[i].used)
			return &P[i];
		if (!P[i].running && (!best || P[i].ended_mono < best->ended_mono))
			best = &P[i];
	}
	if (best)
		proc_release(best);
	return best;
}

static unsigned running_count(void)
{
	unsigned n = 0;

	for (unsigned i = 0; i < WIRE_PROC_MAX; i++)
		n += P[i].used && P[i].running;
	return n;
}

static void ring_read(struct ring *r, size_t budget)
{
	size_t done = 0;

	while (r->fd >= 0 && done < budget) {
		size_t off = (size_t)(r->total % WIRE_PROC_RING);
		size_t want = WIRE_PROC_RING - off;
		ssize_t n;

		if (want > sizeof(scratch))
			want = sizeof(scratch);
		n = read(r->fd, r->buf + off, want);
		if (n > 0) {
			r->total += (uint64_t)n;
			done += (size_t)n;
			continue;
		}
		if (n < 0 && (errno == EINTR))
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		ring_close(r); /* EOF or error */
	}
}

/* Copy the bytes of r from `from` (clamped to what the ring keeps) into
 * the writer: OFFSET (where they start), DATA (<= WIRE_PROC_CHUNK), END. */
static void ring_put(const struct ring *r, uint64_t from, struct wire_writer *w, uint16_t t_off,
		     uint16_t t_data, uint16_t t_end)
{
	uint64_t oldest = r->total > WIRE_PROC_RING ? r->total - WIRE_PROC_RING : 0;
	uint64_t start = from < oldest ? oldest : from > r->total ? r->total : from;
	size_t len = (size_t)(r->total - start), off;

	if (len > WIRE_PROC_CHUNK)
		len = WIRE_PROC_CHUNK;
	off = (size_t)(start % WIRE_PROC_RING);
	wire_put_u64(w, t_off, start);
	if (len == 0 || off + len <= WIRE_PROC_RING) {
		wire_put_bytes(w, t_data, r->buf ? r->buf + off : (const uint8_t *)"", len);
	} else {
		/* wrapped: the two pieces, contiguous, as one field */
		static uint8_t joined[WIRE_PROC_CHUNK];
		size_t first = WIRE_PROC_RING - off;

		memcpy(joined, r->buf + off, first);
		memcpy(joined + first, r->buf, len - first);
		wire_put_bytes(w, t_data, joined, len);
	}
	wire_put_u64(w, t_end, r->total);
}

/* ------------------------------------------------------------- requests */

struct proc_args {
	uint32_t op, pid, signal, max_procs;
	bool have_op, have_pid, close;
	uint64_t out_off, err_off;
	const uint8_t *data;
	size_t data_len;
};

static int args_parse(const uint8_t *p, size_t len, struct proc_args *a)
{
	struct wire_reader rd;
	struct wire_field f;
	int rc, bad = 0;

	memset(a, 0, sizeof(*a));
	a->max_procs = WIRE_PROC_MAX;
	wire_reader_init(&rd, p, len);
	while ((rc = wire_next(&rd, &f)) == 1 && !bad) {
		uint32_t v;

		switch (f.tag) {
		case WIRE_T_PROC_OP:
			bad = wire_field_u32(&f, &a->op);
			a->have_op = true;
			break;
		case WIRE_T_PID:
			bad = wire_field_u32(&f, &a->pid);
			a->have_pid = true;
			break;
		case WIRE_T_SIGNAL:
			bad = wire_field_u32(&f, &a->signal);
			break;
		case WIRE_T_MAX_PROCS:
			bad = wire_field_u32(&f, &a->max_procs);
			break;
		case WIRE_T_OUT_OFFSET:
			bad = wire_field_u64(&f, &a->out_off);
			break;
		case WIRE_T_ERR_OFFSET:
			bad = wire_field_u64(&f, &a->err_off);
			break;
		case WIRE_T_CLOSE:
			bad = wire_field_u32(&f, &v);
			a->close = v != 0;
			break;
		case WIRE_T_DATA:
			a->data = f.value;
			a->data_len = f.len;
			break;
		default:
			break;
		}
	}
	return rc < 0 || bad || !a->have_op ? -1 : 0;
}

static void proc_start(uint32_t id, const uint8_t *p, size_t len, const struct proc_args *a)
{
	struct guest_child c;
	struct wire_reader rd;
	struct wire_field f;
	struct proc *pr;
	uint8_t buf[64];
	struct wire_writer w;
	bool has_timeout = false;

	if (running_count() >= (a->max_procs < WIRE_PROC_MAX ? a->max_procs : WIRE_PROC_MAX) ||
	    !(pr = proc_slot())) {
		guest_send_error(id, WIRE_ERR_BUSY, NULL,
				 "too many background processes run in this sandbox");
		return;
	}
	wire_reader_init(&rd, p, len);
	while (wire_next(&rd, &f) == 1)
		if (f.tag == WIRE_T_TIMEOUT_MS)
			has_timeout = true;
	if (guest_spawn(id, p, len, true, &c) < 0)
		return;
	memset(pr, 0, sizeof(*pr));
	pr->out.buf = malloc(WIRE_PROC_RING);
	pr->err.buf = malloc(WIRE_PROC_RING);
	pr->used = pr->running = true;
	pr->pid = c.pid;
	pr->in_fd = c.in_fd;
	pr->out.fd = c.out_fd;
	pr->err.fd = c.err_fd;
	pr->started_ns = wall_ns();
	pr->deadline_ms = has_timeout ? c.start_ms + c.timeout_ms : 0;
	memcpy(pr->cgroup, c.cgroup, sizeof(pr->cgroup));
	if (!pr->out.buf || !pr->err.buf) {
		/* no ring: the pipes are still drained, nothing is kept */
		ring_close(&pr->out);
		ring_close(&pr->err);
		guest_log("no memory for the output rings of process %d", (int)c.pid);
	}
	wire_reader_init(&rd, p, len);
	while (wire_next(&rd, &f) == 1)
		if (f.tag == WIRE_T_COMMAND) {
			pr->cmd_len = f.len < CMD_HEAD ? f.len : CMD_HEAD;
			memcpy(pr->cmd, f.value, pr->cmd_len);
		}
	wire_writer_init(&w, buf, sizeof(buf));
	wire_put_u32(&w, WIRE_T_PID, (uint32_t)c.pid);
	wire_put_u64(&w, WIRE_T_TIME_NS, pr->started_ns);
	wire_put_u32(&w, WIRE_T_RUNNING, 1);
	guest_frame_send(WIRE_PROC_REPLY, id, w.buf, w.len);
}

static void proc_list(uint32_t id)
{
	static uint8_t buf[WIRE_MAX_GUEST_PAYLOAD];
	struct wire_writer w;

	wire_writer_init(&w, buf, sizeof(buf));
	for (unsigned i = 0; i < WIRE_PROC_MAX; i++) {
		uint8_t e[CMD_HEAD + 96];
		struct wire_writer ew;
		const struct proc *pr = &P[i];

		if (!pr->used)
			continue;
		wire_writer_init(&ew, e, sizeof(e));
		wire_put_u32(&ew, WIRE_T_PID, (uint32_t)pr->pid);
		wire_put_bytes(&ew, WIRE_T_COMMAND, pr->cmd, pr->cmd_len);
		wire_put_u64(&ew, WIRE_T_TIME_NS, pr->started_ns);
		wire_put_u32(&ew, WIRE_T_RUNNING, pr->running);
		if (!pr->running)
			wire_put_u32(&ew, WIRE_T_EXIT_CODE, (uint32_t)pr->exit_code);
		wire_put_bytes(&w, WIRE_T_PROC_ENTRY, e, ew.len);
	}
	guest_frame_send(WIRE_PROC_REPLY, id, w.buf, w.len);
}

static void proc_output(uint32_t id, struct proc *pr, const struct proc_args *a)
{
	static uint8_t buf[WIRE_MAX_GUEST_PAYLOAD];
	struct wire_writer w;

	/* what the pipes hold now, so a poll after exit sees everything */
	ring_read(&pr->out, PROC_READ_BUDGET);
	ring_read(&pr->err, PROC_READ_BUDGET);
	wire_writer_init(&w, buf, sizeof(buf));
	wire_put_u32(&w, WIRE_T_PID, (uint32_t)pr->pid);
	wire_put_u32(&w, WIRE_T_RUNNING, pr->running);
	if (!pr->running)
		wire_put_u32(&w, WIRE_T_EXIT_CODE, (uint32_t)pr->exit_code);
	ring_put(&pr->out, a->out_off, &w, WIRE_T_OUT_OFFSET, WIRE_T_OUT_DATA, WIRE_T_OUT_END);
	ring_put(&pr->err, a->err_off, &w, WIRE_T_ERR_OFFSET, WIRE_T_ERR_DATA, WIRE_T_ERR_END);
	guest_frame_send(WIRE_PROC_REPLY, id, w.buf, w.len);
}

static void proc_stdin(uint32_t id, struct proc *pr, const struct proc_args *a)
{
	uint8_t buf[16];
	struct wire_writer w;
	size_t done = 0;

	while (pr->in_fd >= 0 && done < a->data_len) {
		ssize_t n = write(pr->in_fd, a->data + done, a->data_len - done);

		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN) { /* EPIPE: nobody reads it any more */
			close(pr->in_fd);
			pr->in_fd = -1;
		}
		break;
	}
	if (a->close && pr->in_fd >= 0 && done == a->data_len) {
		close(pr->in_fd);
		pr->in_fd = -1;
	}
	wire_writer_init(&w, buf, sizeof(buf));
	wire_put_u32(&w, WIRE_T_WRITTEN, (uint32_t)done);
	guest_frame_send(WIRE_PROC_REPLY, id, w.buf, w.len);
}

static void proc_kill_tree(struct proc *pr, int sig)
{
	char path[128];

	if (sig == SIGKILL && pr->cgroup[0]) {
		snprintf(path, sizeof(path), "%s/cgroup.kill", pr->cgroup);
		int fd = open(path, O_WRONLY | O_CLOEXEC);

		if (fd >= 0) {
			if (write(fd, "1", 1) < 0) {
			}
			close(fd);
		}
	}
	if (pr->running && pr->pid > 1)
		kill(-pr->pid, sig);
}

/* Signal the tree and answer with the state it was in: a process that
 * had already exited gets no signal and says so (RUNNING 0, its code). */
static void proc_signal(uint32_t id, struct proc *pr, int sig)
{
	uint8_t buf[32];
	struct wire_writer w;

	wire_writer_init(&w, buf, sizeof(buf));
	wire_put_u32(&w, WIRE_T_PID, (uint32_t)pr->pid);
	wire_put_u32(&w, WIRE_T_RUNNING, pr->running);
	if (!pr->running)
		wire_put_u32(&w, WIRE_T_EXIT_CODE, (uint32_t)pr->exit_code);
	else
		proc_kill_tree(pr, sig);
	guest_frame_send(WIRE_PROC_REPLY, id, w.buf, w.len);
}

void guest_proc_request(uint32_t id, const uint8_t *p, size_t len)
{
	struct proc_args a;
	struct proc *pr = NULL;

	if (id == 0 || args_parse(p, len, &a) < 0) {
		guest_send_error(id, WIRE_ERR_BAD_REQUEST, NULL, "malformed process request");
		return;
	}
	if (a.op == WIRE_PROC_START) {
		proc_start(id, p, len, &a);
		return;
	}
	if (a.op == WIRE_PROC_LIST) {
		proc_list(id);
		return;
	}
	if (a.op < WIRE_PROC_OUTPUT || a.op > WIRE_PROC_SIGNAL) {
		guest_send_error(id, WIRE_ERR_BAD_REQUEST, NULL, "unknown process operation");
		return;
	}
	if (!a.have_pid || !(pr = proc_find(a.pid))) {
		guest_send_error(id, WIRE_ERR_NO_PROCESS, "pid", "no such process");
		return;
	}
	switch (a.op) {
	case WIRE_PROC_OUTPUT:
		proc_output(id, pr, &a);
		break;
	case WIRE_PROC_STDIN:
		proc_stdin(id, pr, &a);
		break;
	case WIRE_PROC_SIGNAL:
		if (a.signal != SIGINT && a.signal != SIGKILL && a.signal != SIGTERM) {
			guest_send_error(id, WIRE_ERR_BAD_REQUEST, "signal",
					 "signal must be INT, KILL or TERM");
			return;
		}
		proc_signal(id, pr, (int)a.signal);
		break;
	}
}

/* ----------------------------------------------------------- the loop */

unsigned guest_proc_pollfds(struct pollfd *pfd, unsigned *tags, unsigned max)
{
	unsigned n = 0;

	for (unsigned i = 0; i < WIRE_PROC_MAX && n + 2 <= max; i++) {
		if (!P[i].used)
			continue;
		if (P[i].out.fd >= 0) {
			pfd[n] = (struct pollfd){.fd = P[i].out.fd, .events = POLLIN};
			tags[n++] = i * 2;
		}
		if (P[i].err.fd >= 0) {
			pfd[n] = (struct pollfd){.fd = P[i].err.fd, .events = POLLIN};
			tags[n++] = i * 2 + 1;
		}
	}
	return n;
}

void guest_proc_ready(unsigned tag)
{
	struct proc *pr = &P[(tag / 2) % WIRE_PROC_MAX];

	if (pr->used)
		ring_read(tag % 2 ? &pr->err : &pr->out, PROC_READ_BUDGET);
}

bool guest_proc_reaped(pid_t pid, int status)
{
	struct proc *pr = proc_find((uint32_t)pid);

	if (!pr || !pr->running)
		return false;
	pr->running = false;
	pr->ended_mono = guest_mono_ms();
	if (pr->timed_out)
		pr->exit_code = 128 + SIGKILL;
	else if (WIFEXITED(status))
		pr->exit_code = WEXITSTATUS(status);
	else if (WIFSIGNALED(status))
		pr->exit_code = 128 + WTERMSIG(status);
	else
		pr->exit_code = 255;
	return true;
}

int64_t guest_proc_tick(int64_t now_ms)
{
	int64_t next = -1;

	for (unsigned i = 0; i < WIRE_PROC_MAX; i++) {
		struct proc *pr = &P[i];

		if (!pr->used || !pr->running || pr->deadline_ms == 0)
			continue;
		if (pr->deadline_ms <= now_ms) {
			pr->timed_out = true;
			pr->deadline_ms = now_ms + KILL_RETRY_MS;
			proc_kill_tree(pr, SIGKILL);
		}
		if (next < 0 || pr->deadline_ms < next)
			next = pr->deadline_ms;
	}
	return next;
}
