/* sandboxd-init: the execs' state, shared by serve.c (the loop, which
 * polls their pipes) and exec.c (their lifecycle). Not a module of its
 * own: the guest's header is init.h.
 */
#ifndef SBX_GUEST_EXEC_PRIV_H
#define SBX_GUEST_EXEC_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define EXEC_MAX      1024	   /* in-flight execs; more -> BUSY */
#define ORPHAN_MAX    1024	   /* background pipes kept after EXIT */
#define READ_BUDGET   (256u << 10) /* bytes per pipe per loop turn */
#define DRAIN_BUDGET  (4u << 20)   /* bytes per pipe drained at exit */
#define KILL_RETRY_MS 1000	   /* re-kill a cgroup that did not die */

struct stream {
	int fd;		/* read end, -1 once closed */
	uint8_t type;	/* WIRE_STDOUT / WIRE_STDERR */
	uint64_t cap;	/* bytes to ship (a terminal's: no cap) */
	uint64_t total; /* bytes read */
	uint64_t kept;	/* bytes accepted for shipping (<= cap) */
	uint8_t *chunk; /* WIRE_MAX_CHUNK bytes being batched, NULL until used */
	size_t chunk_len;
};

struct exec {
	bool used;
	bool detached;	/* its connection is gone: ship nothing */
	bool reaped;	/* the sh exited; EXIT pending */
	bool timed_out; /* killed on deadline or KILL */
	bool stream;	/* v3 STREAM: ship output as soon as it is read */
	bool paused;	/* v3 PAUSE: its pipes are not read until RESUME */
	bool hup;	/* v5 terminal: SIGHUP sent (a KILL), SIGKILL next */
	int pty;	/* v5 terminal: its slot in pty.c + 1, 0 for none */
	uint32_t id;
	pid_t pid;
	int status;
	int64_t start_ms, end_ms, deadline_ms;
	struct stream out, err;
	char cgroup[96]; /* "" without cgroup2 */
};

/* The execs and the pipes background processes kept after their exec
 * ended (exec.c's; serve.c's loop reads them). */
struct guest_execs {
	struct exec execs[EXEC_MAX];
	unsigned n_execs;
	int orphans[ORPHAN_MAX];
	unsigned n_orphans;
	uint8_t scratch[64 * 1024];
};
extern struct guest_execs X;

/* An EXEC from the host: spawn it (guest_spawn) or answer an ERROR. */
void guest_exec_start(uint32_t id, const uint8_t *p, size_t len);
/* A KILL: a terminal hangs up first (SIGHUP), anything else SIGKILL. */
void guest_exec_kill_req(uint32_t id);
/* v3 PAUSE/RESUME of a streamed exec's pipes. */
void guest_exec_pause_req(uint32_t id, bool paused);
/* SIGCHLD: reap every child (processes', execs', transfers' helpers). */
void guest_exec_reap(void);
/* SIGKILL every process of the exec. */
void guest_exec_kill(struct exec *e);
/* The sh was reaped: drain, EXIT, orphan the pipes still held, free. */
void guest_exec_finish(struct exec *e);
/* Read up to budget bytes of one of its pipes (a streamed exec ships at
 * once); closes the fd at EOF. */
void guest_stream_read(struct exec *e, struct stream *s, size_t budget);
/* Read and drop an orphan pipe: 1 while open, 0 once closed. */
int guest_orphan_read(int fd);

#endif
